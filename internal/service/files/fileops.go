package files

import (
	"errors"
	"fmt"
	"path"
	"syscall"

	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// File operations beyond read, write, list and delete: what a program
// written against a VM's filesystem expects (the E2B surface's Stat,
// MakeDir, Move and ListDir).

// Stat describes one entry of se's filesystem (a symlink is described,
// not followed).
func (f *Files) Stat(se *session.Session, p string) (*FileInfo, error) {
	o, err := open(se, p, false, false)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return o.stat()
}

// MakeDir creates a directory and its parents in se's filesystem; it
// reports false when the directory was already there.
func (f *Files) MakeDir(se *session.Session, p string) (bool, error) {
	o, err := open(se, p, true, false)
	if err != nil {
		// Out of the view: refused as a read-only place when it is one.
		if _, werr := open(se, p, true, true); errors.Is(werr, errdefs.ErrPermission) {
			return false, werr
		}
		return false, err
	}
	defer o.Close()
	if o.r == nil || o.rel == "." {
		return false, nil // a directory of the view itself: already there
	}
	if e, err := o.r.Lstat(o.rel); err == nil {
		if !e.Mode.IsDir() {
			return false, fmt.Errorf("%w: %q exists and is not a directory", errdefs.ErrBadPath, p)
		}
		return false, nil
	}
	if !o.m.writable {
		return false, o.v.readOnly(p)
	}
	if _, err := o.r.MkdirAll(o.rel, 0o755, o.se.SandboxUID()); err != nil {
		return false, fileError(p, err)
	}
	return true, nil
}

// Move renames a file or directory within se's writable filesystem,
// creating the destination's parents, and describes it at its new place.
func (f *Files) Move(se *session.Session, from, to string) (*FileInfo, error) {
	src, err := open(se, from, false, true)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	dst, err := open(se, to, false, true)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	if src.rel == "." || dst.rel == "." {
		return nil, fmt.Errorf("%w: %s itself cannot be moved or replaced", errdefs.ErrBadPath, src.m.at)
	}
	if src.m.host != dst.m.host {
		// Two file systems on the host: a rename cannot join them.
		return nil, fmt.Errorf("%w: %q and %q are on different file systems (%s and %s); copy the file instead", errdefs.ErrInvalidRequest, from, to, src.m.at, dst.m.at)
	}
	r := src.r
	if _, err := r.Lstat(src.rel); err != nil {
		return nil, fileError(from, err)
	}
	if dir := path.Dir(dst.rel); dir != "." {
		if _, err := r.MkdirAll(dir, 0o755, src.se.SandboxUID()); err != nil {
			return nil, fileError(to, err)
		}
	}
	if err := r.Rename(src.rel, dst.rel); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return nil, fmt.Errorf("%w: %q is a directory that is not empty", errdefs.ErrBadPath, to)
		}
		return nil, fileError(to, err)
	}
	return dst.describe(dst.rel)
}
