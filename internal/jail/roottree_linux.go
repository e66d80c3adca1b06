package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// inRoot resolves every path as if root were "/": an absolute symlink
// target starts at the root, ".." stops at it, and no magic link of /proc
// is followed. The root is an image's, authored by whoever wrote the image.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// rootTree reads an environment's root through a descriptor of it: every
// path is opened with openat2 resolving in the root, never by a path
// string on the host, so no symlink inside leads to a host file.
type rootTree struct {
	dir string
	fd  int
}

// CheckRoot opens and checks an environment's root directory (Spec.Root):
// an absolute path, itself no symlink, a directory owned by the operator
// (root; the current user rootless) that neither group nor others may
// write. It returns an O_PATH descriptor of it.
func CheckRoot(root string) (*os.File, error) {
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return nil, fmt.Errorf("jail: root %q: give a clean absolute path", root)
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("jail: root %s must be a directory (not a symlink): %w", root, err)
	}
	f := os.NewFile(uintptr(fd), root)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("jail: root %s: %w", root, err)
	}
	if int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, fmt.Errorf("jail: root %s is owned by uid %d, not by the operator (uid %d)", root, st.Uid, os.Geteuid())
	}
	if st.Mode&0o022 != 0 {
		f.Close()
		return nil, fmt.Errorf("jail: root %s is writable by group or others (mode %o)", root, st.Mode&0o7777)
	}
	return f, nil
}

// openRootTree checks root (CheckRoot) and opens its tree.
func openRootTree(root string) (*rootTree, error) {
	f, err := CheckRoot(root)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	return &rootTree{dir: root, fd: fd}, nil
}

// openAt opens p (a path as the sandbox sees it) beneath the root.
func (t *rootTree) openAt(p string, flags int) (int, error) {
	rel := strings.TrimLeft(filepath.Clean("/"+p), "/")
	if rel == "" {
		rel = "."
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: inRoot}
	for range 8 {
		fd, err := unix.Openat2(t.fd, rel, how)
		if err == unix.EAGAIN || err == unix.EINTR { // a rename raced the lookup
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: t.dir + "/" + rel, Err: err}
		}
		return fd, nil
	}
	return -1, &fs.PathError{Op: "open", Path: t.dir + "/" + rel, Err: unix.EAGAIN}
}

func (t *rootTree) statOf(p string, flags int) (fs.FileInfo, error) {
	fd, err := t.openAt(p, unix.O_PATH|flags)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return f.Stat()
}

func (t *rootTree) Lstat(p string) (fs.FileInfo, error) { return t.statOf(p, unix.O_NOFOLLOW) }
func (t *rootTree) Stat(p string) (fs.FileInfo, error)  { return t.statOf(p, 0) }

func (t *rootTree) Readlink(p string) (string, error) {
	fd, err := t.openAt(p, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return readlinkFD(fd)
}

// Open opens p for reading if it is a regular file. O_NONBLOCK: an open
// of a FIFO for reading waits for a writer, for ever (an image's author
// controls what its files are); O_NOCTTY, for a terminal's. Whatever is
// not a regular file is refused once opened (see checkRegular).
func (t *rootTree) Open(p string) (*os.File, error) {
	fd, err := t.openAt(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	return checkRegular(os.NewFile(uintptr(fd), t.dir+"/"+strings.TrimLeft(filepath.Clean("/"+p), "/")), nil)
}

// ReadDir and ReadDirFile open directories only: O_DIRECTORY fails on
// anything else before it is opened, so no FIFO is waited on.
func (t *rootTree) ReadDir(p string) ([]fs.DirEntry, error) {
	fd, err := t.openAt(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return f.ReadDir(-1)
}

// ReadDirFile opens directory p of the root for reading its entries.
func (t *rootTree) ReadDirFile(p string) (*os.File, error) {
	fd, err := t.openAt(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

func (t *rootTree) Close() error { return unix.Close(t.fd) }

// readlinkFD reads the target of the symlink an O_PATH|O_NOFOLLOW
// descriptor holds.
func readlinkFD(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", errors.New("symlink target too long")
	}
	return string(buf[:n]), nil
}
