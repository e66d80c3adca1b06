package jail

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
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

func (hostTree) Lstat(p string) (fs.FileInfo, error)     { return os.Lstat(p) }
func (hostTree) Stat(p string) (fs.FileInfo, error)      { return os.Stat(p) }
func (hostTree) Readlink(p string) (string, error)       { return os.Readlink(p) }
func (hostTree) Open(p string) (*os.File, error)         { return os.Open(p) }
func (hostTree) ReadDir(p string) ([]fs.DirEntry, error) { return os.ReadDir(p) }
func (hostTree) Close() error                            { return nil }

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
