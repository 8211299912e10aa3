package bolt_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// A file bbolt cannot open as a database at all (text, too short for its
// two meta pages, or both meta pages damaged) is "a file bbolt itself
// cannot read": Open reports it as a *CorruptError with no bucket, as it
// does a file bbolt panics on, so that an embedder can tell a damaged
// state file from a missing directory or a file it may not read. Its cause
// is kept. The failed Open leaves no lock behind.
func TestOpenOfAFileBboltCannotReadIsCorrupt(t *testing.T) {
	good := func() []byte {
		path := tempPath(t)
		st := mustOpen(t, path)
		create(t, st, "10.0.0.1", svc("a", "b"))
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	metaDamaged := bytes.Clone(good)
	const page = 4096
	for _, off := range []int{0, page} { // both meta pages
		for i := 16; i < 80; i++ {
			metaDamaged[off+i] ^= 0x5a
		}
	}
	for what, content := range map[string][]byte{
		"a short text file":   []byte("not a database at all"),
		"a long text file":    bytes.Repeat([]byte("not a database at all\n"), 2000),
		"its first page only": good[:page],
		"both meta pages":     metaDamaged,
	} {
		for _, ro := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, read-only %v", what, ro), func(t *testing.T) {
				path := tempPath(t)
				if err := os.WriteFile(path, content, 0o600); err != nil {
					t.Fatal(err)
				}
				opts := []bolt.Option{bolt.WithLockTimeout(0)}
				if ro {
					opts = append(opts, bolt.WithReadOnly())
				}
				st, err := bolt.Open(path, opts...)
				if err == nil {
					st.Close()
					t.Fatal("Open succeeded")
				}
				var ce *bolt.CorruptError
				if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &ce) || ce.Bucket != "" {
					t.Fatalf("Open: %v, want a *bolt.CorruptError with no bucket", err)
				}
				if ce.Err == nil || errors.Unwrap(ce.Err) == nil {
					t.Errorf("Open: %v: the cause is not kept", err)
				}
				if _, again := bolt.Open(path, opts...); errors.Is(again, bolt.ErrLocked) {
					t.Errorf("Open again: %v: the failed Open left its lock", again)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
					t.Error("a refused Open changed the file")
				}
			})
		}
	}
}
