package snapstore

import (
	"context"
	"io"
	"time"
)

// backend keeps records and blobs. The Store does every check (seals,
// limits, expiry); a backend provides atomicity and a stable view.
type backend interface {
	// list returns the owner's records (unverified).
	list(ctx context.Context, owner string) ([]record, error)
	// read opens a stable view of one snapshot; ErrNotFound if none.
	read(ctx context.Context, owner, id string) (view, error)
	// begin starts an invisible snapshot; ErrExists if the id is taken.
	begin(ctx context.Context, owner, id string) (txn, error)
	// remove deletes a snapshot at once; ErrNotFound if none.
	remove(ctx context.Context, owner, id string) error
	// sweep judges every stored entry, removes the expired ones and the
	// orphaned data of interrupted writes and deletes.
	sweep(ctx context.Context, now time.Time, judge func(r record, owner, id string) verdict) (GCStats, error)
	close() error
}

// view is one snapshot as it was when read: every blob reader sees the
// same bytes.
type view interface {
	record() record
	// blob reads a blob from its start; size is the sealed size.
	blob(ctx context.Context, name string, size int64) (io.Reader, error)
	close() error
}

// txn is a snapshot being written, invisible until commit.
type txn interface {
	// blob starts a blob; the previous one was closed.
	blob(ctx context.Context, name string) (io.WriteCloser, error)
	// commit publishes rec atomically, once check, given the owner's
	// records under the owner's lock, passes.
	commit(ctx context.Context, rec record, m Manifest, check func([]record) error) error
	// abort drops everything written (idempotent; no-op after commit).
	abort()
}
