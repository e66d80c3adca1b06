package vault

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// dirBackend keeps each secret in a file <dir>/<owner's hash>/<name>,
// mode 0600, replaced by rename: a crash leaves the old value or the new.
type dirBackend struct {
	dir string
	mu  sync.Mutex // orders writes, so MaxPerOwner holds
}

// dirRecord is a secret's file.
type dirRecord struct {
	Owner   string    `json:"owner"`
	Name    string    `json:"name"`
	Created time.Time `json:"created_at"`
	Sealed  []byte    `json:"sealed"`
}

func openDir(dir string) (*dirBackend, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: no directory", ErrUnavailable)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return &dirBackend{dir: dir}, nil
}

func (d *dirBackend) ownerDir(owner string) string {
	h := sha256.Sum256([]byte(owner))
	return filepath.Join(d.dir, hex.EncodeToString(h[:16]))
}

func (d *dirBackend) put(_ context.Context, owner, name string, created time.Time, sealed []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	od := d.ownerDir(owner)
	if err := os.MkdirAll(od, 0o700); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	names, err := d.names(od)
	if err != nil {
		return err
	}
	if len(names) >= MaxPerOwner && !slices.Contains(names, name) {
		return fmt.Errorf("%w: at most %d secrets an owner; delete one first", ErrLimit, MaxPerOwner)
	}
	b, err := json.Marshal(dirRecord{Owner: owner, Name: name, Created: created, Sealed: sealed})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(od, ".put-*")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(od, name))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// names lists the secrets in an owner's directory.
func (d *dirBackend) names(od string) ([]string, error) {
	ents, err := os.ReadDir(od)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

func (d *dirBackend) read(owner, name string) (dirRecord, error) {
	var r dirRecord
	b, err := os.ReadFile(filepath.Join(d.ownerDir(owner), name))
	if errors.Is(err, fs.ErrNotExist) {
		return r, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return r, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Owner != owner || r.Name != name {
		return r, fmt.Errorf("%w: secret %q is damaged", ErrUnavailable, name)
	}
	return r, nil
}

func (d *dirBackend) get(_ context.Context, owner, name string) ([]byte, error) {
	r, err := d.read(owner, name)
	return r.Sealed, err
}

func (d *dirBackend) list(_ context.Context, owner string) ([]Secret, error) {
	names, err := d.names(d.ownerDir(owner))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := []Secret{}
	for _, n := range names {
		if r, err := d.read(owner, n); err == nil {
			out = append(out, Secret{Name: n, Created: r.Created})
		}
	}
	return out, nil
}

func (d *dirBackend) remove(_ context.Context, owner, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := os.Remove(filepath.Join(d.ownerDir(owner), name))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

func (d *dirBackend) close() error { return nil }
