package envs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/codecage/codecage/internal/service/errdefs"
)

// A chain's Dockerfile stages COPY files uploaded before it starts (an
// E2B template's copy steps): each upload is a (gzipped) tar named by
// its hash, kept on disk under the state directory until the chain of
// its environment ends or the environment is removed.

const (
	maxUploadBytes    = 256 << 20 // one archive, as sent
	maxUploadsKept    = 1 << 30   // every archive kept, in all
	maxUploadsPerName = 64
)

// uploads is the store of the files uploaded for chains, by environment
// name and hash.
type uploads struct {
	base  string // the state directory ("": the temporary one)
	mu    sync.Mutex
	dir   string                      // created at the first upload
	files map[string]map[string]int64 // name -> hash -> size
	total int64
}

// rootLocked is the uploads' directory, swept of a previous process's at
// first use.
func (u *uploads) rootLocked() (string, error) {
	if u.dir != "" {
		return u.dir, nil
	}
	base := u.base
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "e2b-template-files")
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	u.dir, u.files = dir, map[string]map[string]int64{}
	return dir, nil
}

func (u *uploads) has(name, hash string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.files[name][hash]
	return ok
}

// put stores one archive for name (read up to the caps).
func (u *uploads) put(name, hash string, body io.Reader) error {
	u.mu.Lock()
	dir, err := u.rootLocked()
	if err == nil && len(u.files[name]) >= maxUploadsPerName {
		err = fmt.Errorf("%w: a template has at most %d uploads", errdefs.ErrTooLarge, maxUploadsPerName)
	}
	room := maxUploadsKept - u.total
	u.mu.Unlock()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "upload-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(body, min(maxUploadBytes, room)+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n > min(maxUploadBytes, room) {
		return fmt.Errorf("%w: an upload is at most %d bytes, and the uploads kept at most %d", errdefs.ErrTooLarge, int64(maxUploadBytes), int64(maxUploadsKept))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := os.Rename(f.Name(), u.pathLocked(name, hash)); err != nil {
		return err
	}
	if u.files[name] == nil {
		u.files[name] = map[string]int64{}
	}
	u.total += n - u.files[name][hash]
	u.files[name][hash] = n
	return nil
}

func (u *uploads) pathLocked(name, hash string) string {
	return filepath.Join(u.dir, name+"."+hash)
}

// drop forgets name's uploads.
func (u *uploads) drop(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for hash, n := range u.files[name] {
		_ = os.Remove(u.pathLocked(name, hash))
		u.total -= n
	}
	delete(u.files, name)
}

// context makes a build context holding each upload unpacked in a
// directory named by its hash; the caller removes it. Stages that reuse
// an upload (the same source and destination, copied again) name its
// hash again: it is unpacked once, and their COPY lines share it.
func (u *uploads) context(name string, hashes []string) (string, error) {
	hashes = slices.Compact(slices.Sorted(slices.Values(hashes)))
	u.mu.Lock()
	dir := u.dir
	var missing string
	for _, h := range hashes {
		if _, ok := u.files[name][h]; !ok {
			missing = h
		}
	}
	u.mu.Unlock()
	if missing != "" {
		return "", fmt.Errorf("the files of hash %s were not uploaded", missing)
	}
	if dir == "" {
		dir = os.TempDir()
	}
	ctxDir, err := os.MkdirTemp(dir, "context-")
	if err != nil {
		return "", err
	}
	for _, h := range hashes {
		u.mu.Lock()
		src := u.pathLocked(name, h)
		u.mu.Unlock()
		if err := unpackUpload(src, filepath.Join(ctxDir, h)); err != nil {
			_ = os.RemoveAll(ctxDir)
			return "", fmt.Errorf("the files of hash %s: %w", h, err)
		}
	}
	return ctxDir, nil
}

// HasUpload reports whether name's files of hash were uploaded.
func (d *Envs) HasUpload(name, hash string) bool { return d.uploads.has(name, hash) }

// PutUpload stores name's files of hash (a tar, gzipped or not), for the
// next chain of name.
func (d *Envs) PutUpload(name, hash string, body io.Reader) error {
	return d.uploads.put(name, hash, body)
}
