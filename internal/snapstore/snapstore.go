// Package snapstore keeps snapshots of sessions (paused sessions and named
// snapshots): a sealed manifest plus named blobs (the workspace as a tar
// stream, gVisor's memory image files, the pickled state), streamed in and
// out, never held whole in memory.
//
// Integrity: every blob is MACed (HMAC-SHA256 with the server's secret, bound
// to the owner, the snapshot id and the blob's name) as it streams in; the
// manifest lists each blob's size and MAC and is itself sealed with the same
// secret. Get verifies the seal, the owner and every blob in full before it
// returns a Snapshot, the only type through which blob bytes can be read, so
// a caller never holds a reader over bytes that were not verified. The bytes
// handed out afterwards are the verified ones: the directory backend reads
// them again from the same open files, the PostgreSQL backend from the same
// REPEATABLE READ transaction (one view of the database); and each reader
// recomputes the MAC, so a file changed in place in between ends in
// ErrTampered instead of io.EOF.
//
// Backends: a directory (the default, under the state directory) and
// PostgreSQL (shared by replicas). See dir.go and postgres.go.
package snapstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors a caller can classify (errors.Is); each returned error wraps one of
// them with the detail.
var (
	// ErrNotFound: no such snapshot for this owner (or it expired).
	// Another owner's snapshot is not found either: its existence is not
	// revealed.
	ErrNotFound = errors.New("snapshot not found")
	// ErrExists: the owner already has a snapshot with this id.
	ErrExists = errors.New("snapshot already exists")
	// ErrLimit: the owner's snapshot count or bytes would exceed its limit.
	ErrLimit = errors.New("snapshot limit reached")
	// ErrTampered: the seal, a blob's MAC or size, or the owner recorded
	// in the sealed manifest does not match: nothing of it is handed out.
	ErrTampered = errors.New("snapshot failed verification")
	// ErrInvalid: a bad id, blob name or manifest field.
	ErrInvalid = errors.New("invalid snapshot request")
	// ErrUnavailable: the backend cannot be reached (database down, disk
	// error, deadline passed).
	ErrUnavailable = errors.New("snapshot store unavailable")
	// ErrNoSecret: the PostgreSQL store needs SANDBOX_SNAPSHOT_SECRET.
	ErrNoSecret = errors.New("snapshot secret not set")
)

// Defaults of Options.
const (
	DefaultMaxBytes = 4 << 30
	DefaultMaxCount = 32
	DefaultTTL      = 7 * 24 * time.Hour
	DefaultTimeout  = 10 * time.Second
	// MinSecretLen is the shortest SANDBOX_SNAPSHOT_SECRET accepted.
	MinSecretLen = 32
)

// Options configure a Store. Dir or DSN chooses the backend.
type Options struct {
	// Dir is the directory backend's root (created 0700 if missing).
	Dir string
	// DSN, a postgres:// URL, chooses the PostgreSQL backend instead.
	DSN string
	// Secret seals and verifies snapshots (SANDBOX_SNAPSHOT_SECRET, at
	// least MinSecretLen characters). Required with DSN: every replica
	// must share it. Empty with Dir: the secret in SecretFile, generated
	// there (mode 0600) the first time.
	Secret string
	// SecretFile holds the generated secret (the lead passes
	// <state dir>/snapshot-secret).
	SecretFile string
	// Per owner: at most MaxBytes of blobs in at most MaxCount snapshots.
	MaxBytes int64
	MaxCount int
	// TTL is how long a snapshot lives (a manifest may ask for less).
	TTL time.Duration
	// Timeout bounds connecting and each database statement, so that a
	// database that goes away is an error, not a hang.
	Timeout time.Duration
	// TempDir holds file sets on their way in and out of a backend that
	// keeps no files (PostgreSQL); empty: the system's.
	TempDir string
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Store is a snapshot store. Its methods are safe for concurrent use.
type Store struct {
	b   backend
	key []byte
	o   Options
}

// Open opens (creating if need be) the store that o describes.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxCount <= 0 {
		o.MaxCount = DefaultMaxCount
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	key, err := loadSecret(o)
	if err != nil {
		return nil, err
	}
	var b backend
	switch {
	case o.DSN != "":
		b, err = openPostgres(ctx, o.DSN, o.Timeout)
	case o.Dir != "":
		b, err = openDir(o.Dir)
	default:
		err = fmt.Errorf("%w: no directory or database given", ErrInvalid)
	}
	if err != nil {
		return nil, err
	}
	return &Store{b: b, key: key, o: o}, nil
}

// Close releases the backend (open Snapshots must be closed first).
func (s *Store) Close() error { return s.b.close() }

// Limits are the per-owner limits in force.
func (s *Store) Limits() (maxBytes int64, maxCount int, ttl time.Duration) {
	return s.o.MaxBytes, s.o.MaxCount, s.o.TTL
}

// Usage is what an owner's live snapshots take.
func (s *Store) Usage(ctx context.Context, owner string) (count int, bytes int64, err error) {
	ms, err := s.List(ctx, owner)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range ms {
		bytes += m.Size
	}
	return len(ms), bytes, nil
}

// List returns the owner's live snapshots, oldest first. Entries that fail
// verification are left out (GC counts them).
func (s *Store) List(ctx context.Context, owner string) ([]Manifest, error) {
	if err := checkOwner(owner); err != nil {
		return nil, err
	}
	recs, err := s.b.list(ctx, owner)
	if err != nil {
		return nil, err
	}
	return s.live(owner, "", recs), nil
}

// live is the verified, unexpired manifests of recs, except id's.
func (s *Store) live(owner, except string, recs []record) []Manifest {
	now := s.o.Now()
	out := []Manifest{}
	for _, r := range recs {
		m, err := s.open(r, owner)
		if err != nil || m.ID == except || !m.Expires.After(now) {
			continue
		}
		out = append(out, m)
	}
	sortManifests(out)
	return out
}

// Stat returns a snapshot's verified manifest without reading its blobs.
func (s *Store) Stat(ctx context.Context, owner, id string) (Manifest, error) {
	if err := checkKey(owner, id); err != nil {
		return Manifest{}, err
	}
	v, err := s.b.read(ctx, owner, id)
	if err != nil {
		return Manifest{}, err
	}
	defer v.close()
	return s.openLive(v.record(), owner, id)
}

// openLive verifies a record read as owner/id and checks it has not expired.
func (s *Store) openLive(r record, owner, id string) (Manifest, error) {
	m, err := s.open(r, owner)
	if err != nil {
		return Manifest{}, err
	}
	if m.ID != id {
		return Manifest{}, fmt.Errorf("%w: %s holds the manifest of %s", ErrTampered, id, capString(m.ID, 140))
	}
	if !m.Expires.After(s.o.Now()) {
		return Manifest{}, fmt.Errorf("%w: %s expired at %s", ErrNotFound, id, m.Expires.UTC().Format(time.RFC3339))
	}
	return m, nil
}

// Delete removes the owner's snapshot.
func (s *Store) Delete(ctx context.Context, owner, id string) error {
	if err := checkKey(owner, id); err != nil {
		return err
	}
	return s.b.remove(ctx, owner, id)
}

// GCStats counts what a collection found.
type GCStats struct {
	Expired    int // expired snapshots removed
	Orphans    int // leftovers of interrupted writes and deletes removed
	Unverified int // entries that fail verification, kept for the operator
}

// GC removes expired snapshots and orphaned data. Entries that fail
// verification are kept and counted: a changed secret would otherwise
// erase every snapshot.
func (s *Store) GC(ctx context.Context) (GCStats, error) {
	now := s.o.Now()
	return s.b.sweep(ctx, now, func(r record, owner, id string) verdict {
		m, err := s.open(r, owner)
		switch {
		case err != nil || m.ID != id:
			return unverified
		case !m.Expires.After(now):
			return expired
		}
		return keep
	})
}

// verdict is GC's judgement of one entry.
type verdict int

const (
	keep verdict = iota
	expired
	unverified
)
