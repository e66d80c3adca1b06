//go:build !linux

package envstore

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// resolveIn (portable, by path: each step re-walks the path, which
// Linux avoids with a directory fd) resolves p inside root the way the sandbox would (absolute
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
