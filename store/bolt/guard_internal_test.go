package bolt

import (
	"errors"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/netipam/netipam/store"
)

// guard reports as a damaged file only a panic bbolt raises; one raised by
// other code run inside it (a bug, the embedder's) goes on as it was.
func TestGuardTellsBboltsPanicsFromOthers(t *testing.T) {
	type mine struct{}
	for name, fn := range map[string]func() error{
		"a panic": func() error { panic(mine{}) },
		"a nil map write of ours": func() error {
			var m map[int]int
			//lint:ignore SA5000 the runtime's panic, raised in our code, is the case
			m[0] = 1
			return nil
		},
	} {
		p := func() (p any) {
			defer func() { p = recover() }()
			err := guard("f.db", fn)
			t.Errorf("%s: guard returned %v, did not panic", name, err)
			return nil
		}()
		if p == nil {
			t.Errorf("%s: no panic", name)
		}
		if _, ok := p.(mine); name == "a panic" && !ok {
			t.Errorf("%s: panicked with %v, not the value raised", name, p)
		}
	}

	// A panic raised in bbolt's code (here on a nil bucket, as a damaged
	// file can give) is the file's.
	err := guard("f.db", func() error {
		var b *bbolt.Bucket
		_ = b.Get([]byte("k"))
		return nil
	})
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("bbolt's panic: %v, want a *CorruptError", err)
	}
}
