package envstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// resolveIn resolves p inside root the way the sandbox would (absolute
// targets from the root), returning the host path it names. It refuses a
// ".." above the root and more than maxHops links; a missing component
// gives fs.ErrNotExist.
func resolveIn(root, p string) (string, error) {
	todo := splitComponents(p)
	var done []string
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", fmt.Errorf("%w: a link climbs out of the root at /%s", ErrBadImage, capName(p))
			}
			done = done[:len(done)-1]
			continue
		}
		cur := filepath.Join(root, filepath.Join(append(done, c)...))
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if len(todo) > 0 && !fi.IsDir() {
				return "", fs.ErrNotExist
			}
			done = append(done, c)
			continue
		}
		hops++
		if hops > maxHops {
			return "", fmt.Errorf("%w: symlink loop at /%s", ErrBadImage, capName(strings.Join(append(done, c), "/")))
		}
		target, err := os.Readlink(cur)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			done = nil
		}
		todo = append(splitComponents(target), todo...)
		if len(todo) > maxPathBytes {
			return "", fmt.Errorf("%w: link at /%s expands past %d components", ErrBadImage, capName(p), maxPathBytes)
		}
	}
	return filepath.Join(root, filepath.Join(done...)), nil
}

func splitComponents(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}
