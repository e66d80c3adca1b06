package envstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// maxHops is how many symlinks one path may pass (Linux's MAXSYMLINKS).
const maxHops = 40

// systemPaths are the paths of a root the sandbox binds or runs from: a
// link among them must resolve inside the root, in few hops.
var systemPaths = []string{
	"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr",
	"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "usr/local", "usr/local/bin", "usr/local/lib",
	"usr/bin/python3", "usr/local/bin/python3",
}

// pythonPaths are where FindPython looks, in order.
var pythonPaths = []string{"/usr/local/bin/python3", "/usr/bin/python3"}

// CheckRoot refuses a root whose system paths loop (a -> b -> a) or
// climb out of it through "..". Absolute link targets are taken inside
// the root, as the sandbox sees them. Each path costs at most maxHops
// link reads, whatever the tree's depth.
func CheckRoot(root string) error {
	for _, p := range systemPaths {
		if _, err := resolveIn(root, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// FindPython returns the path inside root of its python3 (the first of
// /usr/local/bin/python3 and /usr/bin/python3 that resolves, within the
// root, to an executable regular file).
func FindPython(root string) (string, error) {
	for _, p := range pythonPaths {
		host, err := resolveIn(root, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		fi, err := os.Lstat(host)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no python3 in /usr/local/bin or /usr/bin of the root", ErrBadImage)
}

func splitComponents(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}
