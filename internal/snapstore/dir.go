package snapstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"
)

// The directory backend. Layout under its root (every path opened through
// an os.Root, so nothing resolves outside it, symlinks included; ids and
// blob names are checked besides):
//
//	lock                          flock: commits, deletes and GC, across processes
//	owners/<sha256(owner)>/<id>/  a committed snapshot: manifest, blobs/<name>
//	tmp/<random>/                 a snapshot being written
//	trash/<random>/               a snapshot being deleted
//
// A snapshot is written whole under tmp/ (files fsynced) and renamed into
// owners/ under the lock: a crash leaves at most a tmp/ entry, which GC
// removes, never a half snapshot that looks whole. A delete renames the
// snapshot into trash/ first, so it disappears at once.
type dirBackend struct {
	path string // the root's absolute path, for file sets
	root *os.Root
	lock *os.File
	mu   sync.Mutex // flock does not exclude goroutines sharing lock's file

	activeMu sync.Mutex
	active   map[string]bool // tmp/ entries this process is writing
}

// orphanGrace is how old a tmp/ entry of another process must be before GC
// takes it for a crash's leftover.
const orphanGrace = time.Hour

// manifestFile holds the seal in hex, a newline, then the manifest's bytes.
const manifestFile = "manifest"

func openDir(dir string) (*dirBackend, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: snapshot directory: %v", ErrUnavailable, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot directory: %v", ErrUnavailable, err)
	}
	for _, d := range []string{"owners", "tmp", "trash"} {
		if err := root.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			root.Close()
			return nil, fmt.Errorf("%w: snapshot directory: %v", ErrUnavailable, err)
		}
	}
	lock, err := root.OpenFile("lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("%w: snapshot directory: %v", ErrUnavailable, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		root.Close()
		lock.Close()
		return nil, fmt.Errorf("%w: snapshot directory: %v", ErrUnavailable, err)
	}
	return &dirBackend{path: abs, root: root, lock: lock, active: map[string]bool{}}, nil
}

func (d *dirBackend) close() error {
	d.lock.Close()
	return d.root.Close()
}

// locked runs f holding the store's lock, in this process and across
// processes sharing the directory.
func (d *dirBackend) locked(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := flock(d.lock); err != nil {
		return fmt.Errorf("%w: locking the snapshot directory: %v", ErrUnavailable, err)
	}
	defer funlock(d.lock)
	return f()
}

func ownerDir(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return path.Join("owners", hex.EncodeToString(h[:20]))
}

func snapDir(owner, id string) string { return path.Join(ownerDir(owner), id) }

func unavailable(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
}

// readRecord reads dir/manifest.
func readRecord(root *os.Root) (record, error) {
	f, err := root.Open(manifestFile)
	if err != nil {
		return record{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestLen+2*sha256.Size+1))
	if err != nil {
		return record{}, err
	}
	if len(b) < 2*sha256.Size+1 || b[2*sha256.Size] != '\n' {
		return record{}, fmt.Errorf("%w: manifest file is malformed", ErrTampered)
	}
	seal, err := hex.DecodeString(string(b[:2*sha256.Size]))
	if err != nil {
		return record{}, fmt.Errorf("%w: manifest file is malformed", ErrTampered)
	}
	return record{raw: b[2*sha256.Size+1:], seal: seal}, nil
}

func (d *dirBackend) list(ctx context.Context, owner string) ([]record, error) {
	od, err := d.root.OpenRoot(ownerDir(owner))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("listing snapshots", err)
	}
	defer od.Close()
	entries, err := readDir(od, ".")
	if err != nil {
		return nil, unavailable("listing snapshots", err)
	}
	var out []record
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, unavailable("listing snapshots", err)
		}
		if checkID(e) != nil {
			continue
		}
		sd, err := od.OpenRoot(e)
		if err != nil {
			continue
		}
		r, err := readRecord(sd)
		sd.Close()
		if err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

func readDir(root *os.Root, name string) ([]string, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func (d *dirBackend) read(ctx context.Context, owner, id string) (view, error) {
	sd, err := d.root.OpenRoot(snapDir(owner, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, unavailable("reading snapshot "+id, err)
	}
	r, err := readRecord(sd)
	if err != nil {
		sd.Close()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if errors.Is(err, ErrTampered) {
			return nil, err
		}
		return nil, unavailable("reading snapshot "+id, err)
	}
	return &dirView{dir: sd, path: filepath.Join(d.path, filepath.FromSlash(snapDir(owner, id))), rec: r,
		files: map[string]*os.File{}, stamps: map[string]fileStamp{}}, nil
}

// dirView holds the snapshot's directory and each blob's file open: later
// reads see the same files even if the snapshot is deleted meanwhile.
type dirView struct {
	dir    *os.Root
	path   string // dir's path, for file sets read in place
	rec    record
	mu     sync.Mutex
	files  map[string]*os.File
	stamps map[string]fileStamp // each file's as opened, before it was verified
}

func (v *dirView) record() record { return v.rec }

func (v *dirView) blob(ctx context.Context, name string, size int64) (io.Reader, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.files[name]
	if f == nil {
		var err error
		f, err = v.dir.Open(path.Join("blobs", name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: blob %s is missing", ErrTampered, name)
		}
		if err != nil {
			return nil, unavailable("reading blob "+name, err)
		}
		v.files[name] = f
	}
	st, err := f.Stat()
	if err != nil {
		return nil, unavailable("reading blob "+name, err)
	}
	if _, ok := v.stamps[name]; !ok {
		v.stamps[name] = stampOf(st)
	}
	if !st.Mode().IsRegular() || st.Size() != size {
		return nil, fmt.Errorf("%w: blob %s is %d bytes, sealed as %d", ErrTampered, name, st.Size(), size)
	}
	return io.NewSectionReader(f, 0, size), nil
}

func (v *dirView) close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, f := range v.files {
		f.Close()
	}
	v.files = nil
	return v.dir.Close()
}

func randomName() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *dirBackend) begin(ctx context.Context, owner, id string) (txn, error) {
	if _, err := d.root.Lstat(snapDir(owner, id)); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, id)
	}
	name := randomName()
	tmp := path.Join("tmp", name)
	if err := d.root.Mkdir(tmp, 0o700); err != nil {
		return nil, unavailable("starting a snapshot", err)
	}
	if err := d.root.Mkdir(path.Join(tmp, "blobs"), 0o700); err != nil {
		d.root.RemoveAll(tmp)
		return nil, unavailable("starting a snapshot", err)
	}
	d.activeMu.Lock()
	d.active[name] = true
	d.activeMu.Unlock()
	return &dirTxn{d: d, name: name, tmp: tmp, owner: owner, id: id}, nil
}

type dirTxn struct {
	d                    *dirBackend
	name, tmp, owner, id string
	done                 bool
}

func (t *dirTxn) blob(ctx context.Context, name string) (io.WriteCloser, error) {
	f, err := t.d.root.OpenFile(path.Join(t.tmp, "blobs", name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, unavailable("writing blob "+name, err)
	}
	return &syncCloser{f: f, name: name}, nil
}

// syncCloser fsyncs a blob file when it ends.
type syncCloser struct {
	f    *os.File
	name string
	done bool
}

func (s *syncCloser) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if err != nil {
		return n, unavailable("writing blob "+s.name, err)
	}
	return n, nil
}

func (s *syncCloser) Close() error {
	if s.done {
		return nil
	}
	s.done = true
	err := s.f.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return unavailable("writing blob "+s.name, err)
	}
	return nil
}

func (t *dirTxn) commit(ctx context.Context, rec record, m Manifest, check func([]record) error) error {
	if err := ctx.Err(); err != nil {
		return unavailable("committing a snapshot", err)
	}
	body := append([]byte(hex.EncodeToString(rec.seal)+"\n"), rec.raw...)
	mf := path.Join(t.tmp, manifestFile)
	f, err := t.d.root.OpenFile(mf, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return unavailable("writing the manifest", err)
	}
	_, err = f.Write(body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(t.d.root, path.Join(t.tmp, "blobs"))
	}
	if err == nil {
		err = syncDir(t.d.root, t.tmp)
	}
	if err != nil {
		return unavailable("writing the manifest", err)
	}
	return t.d.locked(func() error {
		recs, err := t.d.list(ctx, t.owner)
		if err != nil {
			return err
		}
		if err := check(recs); err != nil {
			return err
		}
		final := snapDir(t.owner, t.id)
		if _, err := t.d.root.Lstat(final); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, t.id)
		}
		if err := t.d.root.MkdirAll(ownerDir(t.owner), 0o700); err != nil {
			return unavailable("committing a snapshot", err)
		}
		if err := t.d.root.Rename(t.tmp, final); err != nil {
			return unavailable("committing a snapshot", err)
		}
		t.done = true
		t.d.forget(t.name)
		if err := syncDir(t.d.root, ownerDir(t.owner)); err != nil {
			return unavailable("committing a snapshot", err)
		}
		return nil
	})
}

func (t *dirTxn) abort() {
	if t.done {
		return
	}
	t.done = true
	t.d.root.RemoveAll(t.tmp)
	t.d.forget(t.name)
}

func (d *dirBackend) forget(name string) {
	d.activeMu.Lock()
	delete(d.active, name)
	d.activeMu.Unlock()
}

func syncDir(root *os.Root, name string) error {
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (d *dirBackend) remove(ctx context.Context, owner, id string) error {
	trash := path.Join("trash", randomName())
	err := d.locked(func() error { return d.toTrash(snapDir(owner, id), trash) })
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return unavailable("deleting snapshot "+id, err)
	}
	if err := d.root.RemoveAll(trash); err != nil {
		return unavailable("deleting snapshot "+id, err) // GC finishes it
	}
	return nil
}

// toTrash makes a snapshot disappear at once; call it locked.
func (d *dirBackend) toTrash(dir, trash string) error {
	if _, err := d.root.Lstat(dir); err != nil {
		return err
	}
	if err := d.root.Rename(dir, trash); err != nil {
		return err
	}
	return syncDir(d.root, path.Dir(dir))
}

func (d *dirBackend) sweep(ctx context.Context, now time.Time, judge func(record, string, string) verdict) (GCStats, error) {
	var st GCStats
	owners, err := readDir(d.root, "owners")
	if err != nil {
		return st, unavailable("collecting snapshots", err)
	}
	for _, o := range owners {
		od := path.Join("owners", o)
		ids, err := readDir(d.root, od)
		if err != nil {
			continue // not a directory: left alone
		}
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				return st, unavailable("collecting snapshots", err)
			}
			sd := path.Join(od, id)
			trash := path.Join("trash", randomName())
			err := d.locked(func() error {
				v := d.judgeEntry(sd, id, judge)
				switch v {
				case unverified:
					st.Unverified++
				case expired, orphan:
					if err := d.toTrash(sd, trash); err != nil {
						return err
					}
					if v == expired {
						st.Expired++
					} else {
						st.Orphans++
					}
				}
				return nil
			})
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return st, unavailable("collecting snapshots", err)
			}
		}
		// An owner with nothing left: its directory goes (fails if a
		// commit just filled it, which is fine).
		d.locked(func() error { return d.root.Remove(od) })
	}
	// Interrupted deletes, and writes no process finished.
	trash, _ := readDir(d.root, "trash")
	for _, t := range trash {
		if d.root.RemoveAll(path.Join("trash", t)) == nil {
			st.Orphans++
		}
	}
	tmps, _ := readDir(d.root, "tmp")
	for _, t := range tmps {
		d.activeMu.Lock()
		mine := d.active[t]
		d.activeMu.Unlock()
		fi, err := d.root.Lstat(path.Join("tmp", t))
		if mine || err != nil || now.Sub(fi.ModTime()) < orphanGrace {
			continue
		}
		if d.root.RemoveAll(path.Join("tmp", t)) == nil {
			st.Orphans++
		}
	}
	return st, nil
}

// orphan: an entry under owners/ that is no snapshot (no manifest).
const orphan verdict = -1

func (d *dirBackend) judgeEntry(sd, id string, judge func(record, string, string) verdict) verdict {
	if checkID(id) != nil {
		return orphan
	}
	r, err := d.root.OpenRoot(sd)
	if err != nil {
		return orphan
	}
	defer r.Close()
	rec, err := readRecord(r)
	if errors.Is(err, fs.ErrNotExist) {
		return orphan
	}
	if err != nil {
		return unverified
	}
	owner, ok := d.ownerOf(rec, sd)
	if !ok {
		return unverified
	}
	return judge(rec, owner, id)
}

// ownerOf reads the owner a record names (unverified: judge verifies it)
// and checks that it is the owner whose directory holds the record.
func (d *dirBackend) ownerOf(rec record, sd string) (string, bool) {
	var m struct {
		Owner string `json:"owner"`
	}
	if json.Unmarshal(rec.raw, &m) != nil || ownerDir(m.Owner) != path.Dir(sd) {
		return "", false
	}
	return m.Owner, true
}
