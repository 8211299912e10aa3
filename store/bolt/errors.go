package bolt

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/netipam/netipam/store"
)

// ErrLocked means the file is held by another open Store, normally in
// another process: bbolt locks the file exclusively while it is open. Open
// returns a *LockedError, which matches it.
var ErrLocked = errors.New("file is locked by another process")

// ErrFormatVersion means the file was written in a layout this package does
// not read (a newer version of it).
var ErrFormatVersion = errors.New("unsupported file format version")

// LockedError is Open's error when the file lock could not be taken within
// the lock timeout. It matches ErrLocked.
type LockedError struct {
	Path    string
	Timeout time.Duration
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("bolt: %s: another process holds the file lock (gave up after %v): %v", e.Path, e.Timeout, ErrLocked)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// CorruptError reports a stored key or value that cannot be decoded, or an
// inconsistency between buckets. It matches store.ErrCorrupt.
type CorruptError struct {
	Bucket string
	Key    []byte
	Err    error
}

func (e *CorruptError) Error() string {
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
