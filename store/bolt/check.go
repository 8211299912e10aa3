package bolt

import (
	"bytes"
	"context"
	"errors"

	"go.etcd.io/bbolt"
)

// maxCheckErrors bounds the problems Check reports.
const maxCheckErrors = 20

// Check reads the whole file in one transaction and reports every problem
// it finds (up to 20, joined), each a *CorruptError matching
// store.ErrCorrupt: a key or value that does not decode, a revision above
// the store revision, an address without its owner-index entry, or an
// owner-index entry without its address. It returns nil for a consistent
// file. It is a tool for operators and tests, not for hot paths.
func (s *Store) Check(ctx context.Context) error {
	var errs []error
	report := func(bucket, key []byte, err error) error {
		errs = append(errs, corruptAt(bucket, key, err))
		if len(errs) >= maxCheckErrors {
			return errStopCheck
		}
		return nil
	}
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		errs = errs[:0]
		if ok, err := checkMeta(tx); err != nil || !ok {
			if err == nil {
				err = corruptAt(bucketMeta, nil, corrupt("buckets missing"))
			}
			errs = append(errs, err)
			return nil
		}
		rev, _ := readMetaRevision(tx) // checkMeta decoded it
		err := tx.Bucket(bucketCIDRs).ForEach(func(k, v []byte) error {
			c, err := decodeCIDRValue(string(k), v)
			switch {
			case err != nil:
				return report(bucketCIDRs, k, err)
			case c.Revision > rev:
				return report(bucketCIDRs, k, corrupt("revision %d above the store revision %d", c.Revision, rev))
			}
			return nil
		})
		if err != nil {
			return err
		}
		owners := tx.Bucket(bucketOwners)
		var okey []byte
		err = tx.Bucket(bucketAddrs).ForEach(func(k, v []byte) error {
			a, err := decodeAddrKey(k)
			if err != nil {
				return report(bucketAddrs, k, err)
			}
			av, err := decodeAddrValue(v)
			switch {
			case err != nil:
				return report(bucketAddrs, k, err)
			case av.rev > rev:
				return report(bucketAddrs, k, corrupt("revision %d above the store revision %d", av.rev, rev))
			}
			okey = appendOwnerKey(okey[:0], av.parent, a)
			if !hasKey(owners, okey) {
				return report(bucketAddrs, k, corrupt("no owner-index entry"))
			}
			return nil
		})
		if err != nil {
			return err
		}
		return owners.ForEach(func(k, v []byte) error {
			p, a, err := decodeOwnerKey(k)
			if err != nil {
				return report(bucketOwners, k, err)
			}
			if len(v) != 0 {
				return report(bucketOwners, k, corrupt("index entry with a value"))
			}
			rec, ok, err := getAddress(tx, a, appendAddrKey(nil, a))
			switch {
			case err != nil:
				return nil // reported with the addrs bucket
			case !ok:
				return report(bucketOwners, k, corrupt("index entry without an address record"))
			case rec.Parent != p:
				return report(bucketOwners, k, corrupt("index entry for an address held by %+v", rec.Parent))
			}
			return nil
		})
	})
	if err != nil && !errors.Is(err, errStopCheck) {
		return err
	}
	return errors.Join(errs...)
}

var errStopCheck = errors.New("too many problems")

// hasKey reports whether b holds key. Bucket.Get cannot tell an empty value
// (the owner index holds only empty ones) from a missing key.
func hasKey(b *bbolt.Bucket, key []byte) bool {
	k, _ := b.Cursor().Seek(key)
	return k != nil && bytes.Equal(k, key)
}
