package bolt

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/netipam/netipam/store"
)

// ErrLocked means the file is held by another open Store, normally in
// another process: bbolt locks the file exclusively while it is open. Open
// returns a *LockedError, which matches it.
var ErrLocked = errors.New("file is locked by another process")

// ErrNotAStore means a file opened WithReadOnly is not a netipam store
// yet (an empty file, say), which a read-only Open does not make it; or,
// opened either way, that the file is a bbolt database of another program's
// (its buckets are not this package's), which Open leaves alone.
var ErrNotAStore = errors.New("not a netipam store")

// ErrReadOnly is the error of a write to a store opened WithReadOnly:
// store.ErrReadOnly, which callers that know no bolt test for.
var ErrReadOnly = store.ErrReadOnly

// ErrFormatVersion means the file was written in a layout this package does
// not read (a newer version of it).
var ErrFormatVersion = errors.New("unsupported file format version")

// LockedError is Open's error when the file lock could not be taken within
// the lock timeout. It matches ErrLocked.
type LockedError struct {
	Path    string
	Timeout time.Duration
}

// Error names the file, how long Open waited, and ErrLocked.
func (e *LockedError) Error() string {
	return fmt.Sprintf("bolt: %s: another process holds the file lock (gave up after %v): %v", e.Path, e.Timeout, ErrLocked)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// CorruptError reports a stored key or value that cannot be decoded, an
// inconsistency between buckets, or (Bucket empty) a file bbolt itself
// cannot read. It matches store.ErrCorrupt.
type CorruptError struct {
	Bucket string
	Key    []byte
	Err    error
}

// Error names the bucket and the key (decoded where it decodes), or only
// the file's damage when Bucket is empty.
func (e *CorruptError) Error() string {
	if e.Bucket == "" {
		return fmt.Sprintf("bolt: %v", e.Err)
	}
	return fmt.Sprintf("bolt: bucket %s, key %s: %v", e.Bucket, formatKey(e.Bucket, e.Key), e.Err)
}

// Unwrap returns the decoder's error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, store.ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == store.ErrCorrupt }

func corruptAt(bucket, key []byte, err error) error {
	return &CorruptError{Bucket: string(bucket), Key: append([]byte(nil), key...), Err: err}
}

// formatKey renders a key for a message: decoded where it decodes, and
// always in hex for keys that are not text.
func formatKey(bucket string, k []byte) string {
	switch bucket {
	case string(bucketCIDRs), string(bucketMeta):
		return strconv.Quote(string(k))
	case string(bucketAddrs):
		if a, err := decodeAddrKey(k); err == nil {
			return fmt.Sprintf("%s (%x)", a, k)
		}
	case string(bucketOwners):
		if p, a, err := decodeOwnerKey(k); err == nil {
			return fmt.Sprintf("%s/%s/%s/%s %s (%x)", p.Group, p.Resource, p.Namespace, p.Name, a, k)
		}
	}
	return fmt.Sprintf("%x", k)
}

// guard runs fn, which uses bbolt, turning a panic raised by bbolt into a
// *CorruptError for the file at path. bbolt panics on a page it cannot
// make sense of (a damaged file), and reading a file shorter than its
// pages say faults, which SetPanicOnFault makes a panic too: an embedder,
// or an operator of ipamctl, gets an error wrapping store.ErrCorrupt, not
// a crash. Any other panic goes on: calling a sound file damaged for a
// bug, or for code of the embedder's, would send its reader to the wrong
// place. bbolt rolls back the transaction a panic leaves before the panic
// reaches here.
func guard(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		what := fmt.Sprintf("bbolt: %v", r)
		if _, fault := r.(interface{ Addr() uintptr }); fault {
			what = "a read past its end: is it truncated?"
		} else if !raisedByBbolt() {
			panic(r) // the stack still holds where it was raised
		}
		err = &CorruptError{Err: fmt.Errorf("%s: damaged file (%s); \"bbolt check %s\" tells more", path, what, path)}
	}()
	return fn()
}

// raisedByBbolt tells, from a deferred function recovering a panic,
// whether the code that raised it is bbolt's: the first frame past the
// panic that is not the standard library's (a runtime check, a sort bbolt
// called) is in bbolt's module.
func raisedByBbolt() bool {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs[:])])
	panicking := false
	for {
		f, more := frames.Next()
		if f.Function == "runtime.gopanic" {
			panicking = true
		} else if pkg := pkgPath(f.Function); panicking && strings.Contains(strings.SplitN(pkg, "/", 2)[0], ".") {
			return pkg == "go.etcd.io/bbolt" || strings.HasPrefix(pkg, "go.etcd.io/bbolt/")
		}
		if !more {
			return false
		}
	}
}

// pkgPath is the import path of the function fn names, as
// runtime.Frame.Function spells it: up to the first dot after the last
// slash, type arguments aside. The standard library's have no dot in their
// first element.
func pkgPath(fn string) string {
	if i := strings.IndexByte(fn, '['); i >= 0 {
		fn = fn[:i]
	}
	slash := strings.LastIndexByte(fn, '/')
	if dot := strings.IndexByte(fn[slash+1:], '.'); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}

// unreadable reports whether err, from bbolt.Open, says the file is no
// database bbolt can read: neither meta page is valid (a file of another
// kind, or both damaged), or it is too short to hold them. bbolt formats
// the last with no error to match, hence the test of the text.
func unreadable(err error) bool {
	return errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) ||
		errors.Is(err, berrors.ErrVersionMismatch) || strings.HasPrefix(err.Error(), "file size too small")
}

// isNoSpace reports whether err says the file may not or cannot grow:
// past WithMaxSize, or a full disk. bbolt formats some of its I/O errors
// with %s, which drops the errno, hence the test of the text as well.
func isNoSpace(err error) bool {
	return errors.Is(err, berrors.ErrMaxSizeReached) || errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), syscall.ENOSPC.Error())
}

// noSpaceError is err, which isNoSpace, made to match store.ErrNoSpace as
// well.
func noSpaceError(path string, err error) error {
	return fmt.Errorf("bolt: %s: %w: %w", path, store.ErrNoSpace, err)
}
