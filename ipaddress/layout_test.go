package ipaddress_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/netipam/netipam/ipaddress"
)

// The pad keeps a record at 128 bytes, whole 16-byte blocks, so that a
// copy of a copy does not wait on overlapping stores (see IPAddress).
// Whoever adds a field takes it from the pad or restores the size.
func TestIPAddressIsWholeBlocks(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the pad sizes the record for 64-bit platforms; on others its fields are smaller")
	}
	if got := unsafe.Sizeof(ipaddress.IPAddress{}); got != 128 {
		t.Fatalf("IPAddress is %d bytes, want 128", got)
	}
}

// The pad is seen by nothing a user prints or encodes with. The record
// prints through String, as its address and owner, whatever its fields
// (checked here for the verbs a log line uses); it encodes to JSON as its
// four fields and nothing more, which fails if the pad is given an
// exported name. (== cannot see it either: the language ignores blank
// fields there, so no test can catch a change of that.)
func TestIPAddressPadIsInvisible(t *testing.T) {
	a := ipaddress.IPAddress{
		Addr:     netip.MustParseAddr("10.96.0.1"),
		Parent:   ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"},
		Created:  time.Unix(1700000000, 0).UTC(),
		Revision: 7,
	}
	for _, verb := range []string{"%v", "%+v", "%s"} {
		if got, want := fmt.Sprintf(verb, a), "10.96.0.1 services/default/kubernetes"; got != want {
			t.Errorf("Sprintf(%q) = %q, want %q", verb, got, want)
		}
	}
	out, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(out, &fields); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(fields))
	if want := []string{"Addr", "Created", "Parent", "Revision"}; !slices.Equal(keys, want) {
		t.Errorf("JSON keys %q, want %q: %s", keys, want, out)
	}
}
