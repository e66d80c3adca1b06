package wsfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// LstatIn describes p (an absolute path of the sandbox) within the host
// directory root, a component at a time, refusing a symlink anywhere but
// the last component: an image's links point into its own tree, and are
// never followed on the host, where they could lead out of it.
func LstatIn(root, p string) (os.FileInfo, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return os.Lstat(root)
	}
	parts := strings.Split(rel, "/")
	at := root
	for i, part := range parts {
		at = filepath.Join(at, part)
		fi, err := os.Lstat(at)
		if err != nil {
			return nil, err
		}
		if i < len(parts)-1 && !fi.IsDir() {
			return nil, fmt.Errorf("%s: %w", p, errNotInRoot)
		}
		if i == len(parts)-1 {
			return fi, nil
		}
	}
	return nil, os.ErrNotExist
}

// errNotInRoot: a path passes through a symlink (or a file) of the root.
var errNotInRoot = errors.New("passes through a link of the environment's root")
