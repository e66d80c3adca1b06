package snapstore

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
)

// File sets of the directory backend: blobs/<set>/<file> in the
// snapshot's directory, written there and read from there in place.

func (t *dirTxn) localDir(name string) (string, error) {
	rel := path.Join(t.tmp, "blobs", name)
	if err := t.d.root.Mkdir(rel, 0o700); err != nil {
		return "", unavailable("writing blob "+name, err)
	}
	return filepath.Join(t.d.path, filepath.FromSlash(rel)), nil
}

func (t *dirTxn) listDir(set string) ([]string, error) {
	names, err := readDir(t.d.root, path.Join(t.tmp, "blobs", set))
	if err != nil {
		return nil, unavailable("sealing blob "+set, err)
	}
	return names, nil
}

func (t *dirTxn) openFile(set, file string) (*os.File, error) {
	rel := path.Join(t.tmp, "blobs", set, file)
	fi, err := t.d.root.Lstat(rel)
	if err != nil {
		return nil, unavailable("sealing blob "+set, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: blob %s holds %s, not a regular file", ErrInvalid, set, quoteCap(file))
	}
	f, err := t.d.root.Open(rel)
	if err != nil {
		return nil, unavailable("sealing blob "+set, err)
	}
	return f, nil
}

func (v *dirView) localDir(name string) string {
	return filepath.Join(v.path, "blobs", name)
}

func (v *dirView) listDir(set string) ([]string, error) {
	return readDir(v.dir, path.Join("blobs", set))
}

// unchanged: the file at the set's path is the one opened for the
// verification (not replaced), a regular file (not a link), and was not
// written since it was opened (its change time and size).
func (v *dirView) unchanged(set, file string) error {
	name := set + "/" + file
	v.mu.Lock()
	f, stamp := v.files[name], v.stamps[name]
	v.mu.Unlock()
	if f == nil {
		return fmt.Errorf("%w: %s was not verified", ErrTampered, quoteCap(name))
	}
	at, err := v.dir.Lstat(path.Join("blobs", name))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrTampered, quoteCap(name), err)
	}
	now, err := f.Stat()
	if err != nil {
		return unavailable("reading blob "+name, err)
	}
	if !at.Mode().IsRegular() || !os.SameFile(at, now) {
		return fmt.Errorf("%w: %s was replaced since it was verified", ErrTampered, quoteCap(name))
	}
	if stampOf(now) != stamp {
		return fmt.Errorf("%w: %s was written since it was verified", ErrTampered, quoteCap(name))
	}
	return nil
}
