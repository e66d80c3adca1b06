package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// tree is a filesystem the program resolver reads, by absolute paths as the
// sandbox sees them: the host's, or an environment's root (see rootTree),
// where no path may lead out of the root.
type tree interface {
	Lstat(p string) (fs.FileInfo, error)
	Stat(p string) (fs.FileInfo, error)
	Readlink(p string) (string, error)
	Open(p string) (*os.File, error)
	ReadDir(p string) ([]fs.DirEntry, error)
	Close() error
}

// hostTree is the host's own filesystem.
type hostTree struct{}

func (hostTree) Lstat(p string) (fs.FileInfo, error) { return os.Lstat(p) }
func (hostTree) Stat(p string) (fs.FileInfo, error)  { return os.Stat(p) }
func (hostTree) Readlink(p string) (string, error)   { return os.Readlink(p) }
func (hostTree) Open(p string) (*os.File, error) {
	return checkRegular(os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0))
}
func (hostTree) ReadDir(p string) ([]fs.DirEntry, error) { return os.ReadDir(p) }
func (hostTree) Close() error                            { return nil }

// ErrNotRegular: a file the resolver would read is not a regular file (a
// FIFO, a device, a socket or a directory where a library or a loader's
// configuration is expected).
var ErrNotRegular = errors.New("not a regular file")

// checkRegular returns f, opened without blocking, if it is a regular
// file; anything else is closed and refused, saying what it is.
func checkRegular(f *os.File, err error) (*os.File, error) {
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: f.Name(), Err: fmt.Errorf("%s, %w", fileKind(fi.Mode()), ErrNotRegular)}
	}
	return f, nil
}

// fileKind names what a file of mode is.
func fileKind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "a special file"
}

// openTree is the host's filesystem for root "", else the tree of root.
func openTree(root string) (tree, error) {
	if root == "" {
		return hostTree{}, nil
	}
	return openRootTree(root)
}

// walkFiles calls fn for each regular file beneath dir (dir included when
// it is one), without following symlinks; unreadable parts are skipped.
func walkFiles(t tree, dir string, fn func(p string, e fs.DirEntry) error) error {
	entries, err := t.ReadDir(dir)
	if err != nil {
		return nil
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if err := walkFiles(t, p, fn); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := fn(p, e); err != nil {
				return err
			}
		}
	}
	return nil
}
