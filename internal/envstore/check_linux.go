package envstore

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// resolveIn resolves p inside root the way the sandbox would (absolute
// targets from the root), returning the host path it names. It refuses a
// ".." above the root and more than maxHops links; a missing component
// gives fs.ErrNotExist. It walks with a directory fd, one lookup per
// component, so a deep tree costs linear work.
func resolveIn(root, p string) (string, error) {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(rootFD)
	cur, err := unix.Dup(rootFD)
	if err != nil {
		return "", err
	}
	defer func() { unix.Close(cur) }()
	step := func(fd int) { unix.Close(cur); cur = fd }

	todo := splitComponents(p)
	var done []string
	hops, steps := 0, 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if steps++; steps > 4*maxPathBytes {
			return "", fmt.Errorf("%w: /%s takes over %d steps to resolve", ErrBadImage, capName(p), 4*maxPathBytes)
		}
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", fmt.Errorf("%w: a link climbs out of the root at /%s", ErrBadImage, capName(p))
			}
			// cur was reached through directories only, so its ".." is
			// the directory before it.
			fd, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return "", err
			}
			step(fd)
			done = done[:len(done)-1]
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT || err == unix.ENOTDIR {
				return "", fs.ErrNotExist
			}
			return "", err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			hops++
			if hops > maxHops {
				return "", fmt.Errorf("%w: symlink loop at /%s", ErrBadImage, capName(strings.Join(append(done, c), "/")))
			}
			buf := make([]byte, maxPathBytes)
			n, err := unix.Readlinkat(cur, c, buf)
			if err != nil {
				return "", err
			}
			target := string(buf[:n])
			if strings.HasPrefix(target, "/") {
				fd, err := unix.Dup(rootFD)
				if err != nil {
					return "", err
				}
				step(fd)
				done = nil
			}
			todo = append(splitComponents(target), todo...)
		case unix.S_IFDIR:
			fd, err := unix.Openat(cur, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return "", err
			}
			step(fd)
			done = append(done, c)
		default:
			if len(todo) > 0 {
				return "", fs.ErrNotExist
			}
			done = append(done, c)
		}
	}
	return filepath.Join(root, filepath.Join(done...)), nil
}
