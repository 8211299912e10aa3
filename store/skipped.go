package store

import (
	"fmt"
	"net/netip"
	"strings"
)

// MaxSkipped is how many records a SkippedError names at most; it counts
// the rest. A badly damaged store then gives an error of bounded size.
const MaxSkipped = 20

// SkippedRecord is a record a read of several records left out because it
// cannot be decoded. It is still in the store, and its address still taken.
type SkippedRecord struct {
	// Addr is the record's address, from its key. The zero Addr when the
	// key does not decode.
	Addr netip.Addr
	// Err says why: it matches ErrCorrupt and names the record's key as
	// the store spells it (an etcd key, a bolt bucket and key).
	Err error
}

// SkippedError is the error of a ListAddresses or an AddressesOf that
// returned every record asked for but those it could not decode (see
// Store.ListAddresses and Store.AddressesOf). It matches ErrCorrupt, and
// unwraps to the error of each record it names.
type SkippedError struct {
	// Records are the first MaxSkipped records left out, in key order.
	Records []SkippedRecord
	// Count is how many records were left out, those past MaxSkipped
	// included.
	Count int
}

// Skip notes that a read left out the record of addr (the zero Addr if
// its key does not decode) for err, which must match ErrCorrupt. For
// stores.
func (e *SkippedError) Skip(addr netip.Addr, err error) {
	e.Count++
	if len(e.Records) < MaxSkipped {
		e.Records = append(e.Records, SkippedRecord{Addr: addr, Err: err})
	}
}

// Error says how many records were left out and why, for each named.
func (e *SkippedError) Error() string {
	var b strings.Builder
	if e.Count == 1 {
		b.WriteString("1 address record cannot be decoded and was left out: ")
	} else {
		fmt.Fprintf(&b, "%d address records cannot be decoded and were left out: ", e.Count)
	}
	for i, r := range e.Records {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprint(&b, r.Err)
	}
	if more := e.Count - len(e.Records); more > 0 {
		fmt.Fprintf(&b, "; and %d more", more)
	}
	return b.String()
}

// Unwrap returns the error of each record named.
func (e *SkippedError) Unwrap() []error {
	errs := make([]error, len(e.Records))
	for i, r := range e.Records {
		errs[i] = r.Err
	}
	return errs
}

// Is makes errors.Is(err, ErrCorrupt) true, whatever the records name.
func (e *SkippedError) Is(target error) bool { return target == ErrCorrupt }
