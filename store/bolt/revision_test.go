package bolt_test

import (
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// TestNoWriteWrapsTheRevision: a file whose revision counter reads
// MaxInt64 (only damage gets there) took a write at revision MinInt64,
// which its own decoders refuse: the file then no longer opened. Every
// write is refused as corrupt instead, and the file stays as it was.
func TestNoWriteWrapsTheRevision(t *testing.T) {
	ctx := ctxT(t)
	path := fileWithOneRecord(t)
	rawPut(t, path, []byte("meta"), []byte("revision"), binary.BigEndian.AppendUint64(nil, math.MaxInt64))
	before := rawDump(t, path)

	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name  string
		write func() error
	}{
		{"CreateAddresses", func() error {
			_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.8"), Parent: svc("default", "b")}})
			return err
		}},
		{"CreateCIDR", func() error {
			_, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "x", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
			return err
		}},
		{"DeleteAddress", func() error {
			_, _, err := st.DeleteAddress(ctx, ip("10.0.0.7"))
			return err
		}},
	} {
		if err := w.write(); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s at revision MaxInt64: %v, want an error matching ErrCorrupt", w.name, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if after := rawDump(t, path); !maps.Equal(before, after) {
		t.Fatal("a write at revision MaxInt64 changed the file")
	}
	st, err = bolt.Open(path)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer st.Close()
	if rec, err := st.GetAddress(ctx, ip("10.0.0.7")); err != nil || rec.Parent != svc("default", "a") {
		t.Fatalf("GetAddress after the refused writes: %+v, %v", rec, err)
	}
}

// fileWithOneRecord returns the path of a closed store holding one record,
// 10.0.0.7 of services/default/a, for a test to damage.
func fileWithOneRecord(t *testing.T) string {
	t.Helper()
	path := tempPath(t)
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	create(t, st, "10.0.0.7", svc("default", "a"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
