package store_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/netipam/netipam/store"
)

// keyError stands for a store's own corrupt-record error: it names a key
// and matches store.ErrCorrupt.
type keyError struct{ key string }

func (e *keyError) Error() string        { return fmt.Sprintf("key %q: %v", e.key, store.ErrCorrupt) }
func (e *keyError) Is(target error) bool { return target == store.ErrCorrupt }

// A SkippedError names at most MaxSkipped records, counts the rest, matches
// ErrCorrupt, and unwraps to each named record's error, which errors.As
// then finds.
func TestSkippedErrorNamesAtMostMaxSkippedAndCountsTheRest(t *testing.T) {
	var e store.SkippedError
	const n = store.MaxSkipped + 5
	for i := range n {
		e.Skip(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), &keyError{key: fmt.Sprintf("k%d", i)})
	}
	var err error = &e
	if e.Count != n || len(e.Records) != store.MaxSkipped || len(e.Unwrap()) != store.MaxSkipped {
		t.Fatalf("Count %d, %d records, %d unwrapped; want %d, %d, %d", e.Count, len(e.Records), len(e.Unwrap()), n, store.MaxSkipped, store.MaxSkipped)
	}
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%v does not match ErrCorrupt", err)
	}
	var ke *keyError
	if !errors.As(err, &ke) || ke.key != "k0" {
		t.Fatalf("errors.As found %v, want the first record's error", ke)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("%d address records", n), `"k0"`, fmt.Sprintf(`"k%d"`, store.MaxSkipped-1), "and 5 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Error() = %q, lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, fmt.Sprintf(`"k%d"`, store.MaxSkipped)) {
		t.Errorf("Error() = %q names a record past MaxSkipped", msg)
	}

	var one store.SkippedError
	one.Skip(netip.Addr{}, &keyError{key: "bad"})
	if got := one.Error(); !strings.HasPrefix(got, "1 address record cannot be decoded and was left out") || strings.Contains(got, "more") {
		t.Errorf("one record: %q", got)
	}
}
