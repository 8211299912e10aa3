package bolt

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	berrors "go.etcd.io/bbolt/errors"
)

// A full disk is no space whether bbolt wraps the errno (a write) or
// flattens it to text (growing the file), and other errors are not.
func TestNoSpaceIsTheBoundOrAFullDisk(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{berrors.ErrMaxSizeReached, true},
		{&os.PathError{Op: "write", Path: "f", Err: syscall.ENOSPC}, true},
		{fmt.Errorf("file resize error: %s", &os.PathError{Op: "truncate", Path: "f", Err: syscall.ENOSPC}), true},
		{&os.PathError{Op: "write", Path: "f", Err: syscall.EIO}, false},
		{errors.New("disk on fire"), false},
	} {
		if got := isNoSpace(c.err); got != c.want {
			t.Errorf("isNoSpace(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
