package snapstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Writer writes one snapshot: Blob for each blob in turn, then Commit. Until
// Commit returns nil nothing of it is visible. Any error (a limit reached
// mid-stream, a backend failure, a cancelled ctx) aborts the whole snapshot
// at once and removes what was written. Not for concurrent use.
type Writer struct {
	s      *Store
	ctx    context.Context
	m      Manifest
	tx     txn
	budget int64 // bytes the owner may still add
	cur    *blobWriter
	names  map[string]bool
	sets   []*fileSet // sealed at Commit
	err    error      // sticky: the first failure
}

// Create checks the manifest and the owner's limits and starts a snapshot.
// ctx bounds the whole write, Commit included.
func (s *Store) Create(ctx context.Context, m Manifest) (*Writer, error) {
	if err := checkManifest(&m); err != nil {
		return nil, err
	}
	if m.ID == "" {
		b := make([]byte, 16)
		rand.Read(b)
		m.ID = hex.EncodeToString(b)
	}
	now := s.o.Now().UTC()
	m.Version, m.Created, m.Blobs, m.Size = FormatVersion, now, nil, 0
	if exp := now.Add(s.o.TTL); m.Expires.IsZero() || m.Expires.After(exp) {
		m.Expires = exp
	} else if !m.Expires.After(now) {
		return nil, fmt.Errorf("%w: expires %s is not in the future", ErrInvalid, m.Expires.UTC())
	}
	m.Expires = m.Expires.UTC()
	// Checked before writing; checked again at commit under the owner's
	// lock, where concurrent writers of one owner are settled.
	recs, err := s.b.list(ctx, m.Owner)
	if err != nil {
		return nil, err
	}
	budget, err := s.room(m.Owner, m.ID, recs)
	if err != nil {
		return nil, err
	}
	tx, err := s.b.begin(ctx, m.Owner, m.ID)
	if err != nil {
		return nil, err
	}
	return &Writer{s: s, ctx: ctx, m: m, tx: tx, budget: budget, names: map[string]bool{}}, nil
}

// room is the bytes the owner may still add with one more snapshot, or
// ErrLimit; recs are the owner's records, id the snapshot being made.
func (s *Store) room(owner, id string, recs []record) (int64, error) {
	live := s.live(owner, "", recs)
	var used int64
	for _, m := range live {
		if m.ID == id {
			return 0, fmt.Errorf("%w: %s", ErrExists, id)
		}
		used += m.Size
	}
	if len(live) >= s.o.MaxCount {
		return 0, fmt.Errorf("%w: the owner has %d snapshots, at most %d", ErrLimit, len(live), s.o.MaxCount)
	}
	if used >= s.o.MaxBytes {
		return 0, fmt.Errorf("%w: the owner's snapshots take %d bytes, at most %d", ErrLimit, used, s.o.MaxBytes)
	}
	return s.o.MaxBytes - used, nil
}

// ID is the snapshot's id (generated when the manifest had none).
func (w *Writer) ID() string { return w.m.ID }

// Blob starts the next blob (the previous one ends); write its bytes to
// the returned writer.
func (w *Writer) Blob(name string) (io.Writer, error) {
	if w.err != nil {
		return nil, w.err
	}
	if err := checkBlobName(name); err != nil {
		return nil, w.fail(err)
	}
	if w.names[name] {
		return nil, w.fail(fmt.Errorf("%w: blob %s written twice", ErrInvalid, name))
	}
	if len(w.names) >= MaxBlobs {
		return nil, w.fail(fmt.Errorf("%w: more than %d blobs", ErrInvalid, MaxBlobs))
	}
	if err := w.endBlob(); err != nil {
		return nil, err
	}
	out, err := w.tx.blob(w.ctx, name)
	if err != nil {
		return nil, w.fail(err)
	}
	w.names[name] = true
	w.cur = &blobWriter{w: w, name: name, out: out, mac: w.s.blobMAC(w.m.Owner, w.m.ID, name)}
	return w.cur, nil
}

func (w *Writer) endBlob() error {
	b := w.cur
	if b == nil {
		return nil
	}
	w.cur = nil
	if err := b.out.Close(); err != nil {
		return w.fail(err)
	}
	w.m.Blobs = append(w.m.Blobs, BlobInfo{Name: b.name, Size: b.n, MAC: hex.EncodeToString(b.mac.Sum(nil))})
	w.m.Size += b.n
	return nil
}

// Commit seals the manifest and makes the snapshot visible, once the
// owner's limits still hold with it. It returns the stored manifest.
func (w *Writer) Commit() (Manifest, error) {
	if w.err != nil {
		return Manifest{}, w.err
	}
	if err := w.endBlob(); err != nil {
		return Manifest{}, err
	}
	if err := w.sealSets(); err != nil {
		return Manifest{}, err
	}
	if w.m.Blobs == nil {
		w.m.Blobs = []BlobInfo{}
	}
	rec, err := w.s.seal(w.m)
	if err != nil {
		return Manifest{}, w.fail(err)
	}
	err = w.tx.commit(w.ctx, rec, w.m, func(recs []record) error {
		room, err := w.s.room(w.m.Owner, w.m.ID, recs)
		if err == nil && w.m.Size > room {
			err = fmt.Errorf("%w: %d more bytes would exceed the owner's %d", ErrLimit, w.m.Size, w.s.o.MaxBytes)
		}
		return err
	})
	if err != nil {
		return Manifest{}, w.fail(err)
	}
	w.err = errors.New("snapstore: snapshot already committed")
	return w.m, nil
}

// Abort drops the snapshot. Safe after a failure or a Commit (no-op then).
func (w *Writer) Abort() {
	if w.err == nil {
		w.fail(errors.New("snapstore: snapshot aborted"))
	}
}

// fail aborts the snapshot and makes err sticky.
func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
		if w.cur != nil {
			w.cur.out.Close()
			w.cur = nil
		}
		w.tx.abort()
		w.dropSets()
	}
	return err
}

// blobWriter MACs and counts a blob on its way to the backend, and stops
// it at the owner's limit.
type blobWriter struct {
	w    *Writer
	name string
	out  io.WriteCloser
	mac  hash.Hash
	n    int64
}

func (b *blobWriter) Write(p []byte) (int, error) {
	w := b.w
	if w.err != nil {
		return 0, w.err
	}
	if w.cur != b {
		return 0, fmt.Errorf("%w: blob %s was ended by the next one", ErrInvalid, b.name)
	}
	if err := w.ctx.Err(); err != nil {
		return 0, w.fail(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	if w.m.Size+b.n+int64(len(p)) > w.budget {
		return 0, w.fail(fmt.Errorf("%w: the snapshot passed the owner's %d bytes while streaming blob %s; nothing was kept", ErrLimit, w.s.o.MaxBytes, b.name))
	}
	b.mac.Write(p)
	n, err := b.out.Write(p)
	b.n += int64(n)
	if err != nil {
		return n, w.fail(err)
	}
	return n, nil
}

// BlobSource is one blob for Put.
type BlobSource struct {
	Name string
	R    io.Reader
}

// Put writes a whole snapshot from readers (Create, Blob, Commit).
func (s *Store) Put(ctx context.Context, m Manifest, blobs ...BlobSource) (Manifest, error) {
	w, err := s.Create(ctx, m)
	if err != nil {
		return Manifest{}, err
	}
	defer w.Abort()
	buf := make([]byte, copyBuf)
	for _, b := range blobs {
		out, err := w.Blob(b.Name)
		if err != nil {
			return Manifest{}, err
		}
		if _, err := io.CopyBuffer(out, onlyReader{b.R}, buf); err != nil {
			if w.err == nil { // the reader failed, not the store
				err = w.fail(fmt.Errorf("snapstore: reading blob %s: %w", b.Name, err))
			}
			return Manifest{}, err
		}
	}
	return w.Commit()
}

// copyBuf is the size of a streaming copy's buffer.
const copyBuf = 1 << 20

// onlyReader hides a reader's WriterTo so CopyBuffer uses the buffer.
type onlyReader struct{ io.Reader }

// Describe records, before Commit, what was learnt while writing: the
// gVisor build, platform and uid a memory image binds to, and what could
// not be saved (capped as in Manifest.NotSaved).
func (w *Writer) Describe(runscVersion, platform string, uid int64, notSaved []string) {
	w.m.RunscVersion = capString(runscVersion, MaxFieldLen)
	w.m.Platform = capString(platform, MaxFieldLen)
	w.m.UID = uid
	w.m.NotSaved = capNotSaved(notSaved)
}

// SetSpec replaces, before Commit, the manifest's spec with one learnt
// while writing (a parked session's state at its capture). A spec that is
// not JSON or too long fails the snapshot.
func (w *Writer) SetSpec(spec json.RawMessage) error {
	if len(spec) > MaxSpecLen || !json.Valid(spec) {
		return w.fail(fmt.Errorf("%w: spec: want at most %d bytes of JSON", ErrInvalid, MaxSpecLen))
	}
	w.m.Spec = spec
	return nil
}
