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
	w := &pathWalk{p: p, rootFD: rootFD, cur: cur, todo: splitComponents(p)}
	defer func() { unix.Close(w.cur) }()
	for steps := 1; len(w.todo) > 0; steps++ {
		c := w.todo[0]
		w.todo = w.todo[1:]
		if steps > 4*maxPathBytes {
			return "", fmt.Errorf("%w: /%s takes over %d steps to resolve", ErrBadImage, capName(p), 4*maxPathBytes)
		}
		if err := w.next(c); err != nil {
			return "", err
		}
	}
	return filepath.Join(root, filepath.Join(w.done...)), nil
}

// pathWalk is one resolveIn: cur is a descriptor of the directory reached
// through done; todo are the components left.
type pathWalk struct {
	p           string // the path resolved, for errors
	rootFD, cur int
	todo, done  []string
	hops        int // links followed
}

// step makes fd the current directory.
func (w *pathWalk) step(fd int) { unix.Close(w.cur); w.cur = fd }

// next walks the component c: ".." climbs (never above the root), a link
// puts its target before the components left, a directory is entered,
// and anything else must be the last component.
func (w *pathWalk) next(c string) error {
	switch c {
	case "", ".":
		return nil
	case "..":
		if len(w.done) == 0 {
			return fmt.Errorf("%w: a link climbs out of the root at /%s", ErrBadImage, capName(w.p))
		}
		// cur was reached through directories only, so its ".." is
		// the directory before it.
		fd, err := unix.Openat(w.cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		w.step(fd)
		w.done = w.done[:len(w.done)-1]
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(w.cur, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return fs.ErrNotExist
		}
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return w.follow(c)
	case unix.S_IFDIR:
		fd, err := unix.Openat(w.cur, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		w.step(fd)
		w.done = append(w.done, c)
	default:
		if len(w.todo) > 0 {
			return fs.ErrNotExist
		}
		w.done = append(w.done, c)
	}
	return nil
}

// follow reads the link c and walks its target next: an absolute one
// from the root.
func (w *pathWalk) follow(c string) error {
	w.hops++
	if w.hops > maxHops {
		return fmt.Errorf("%w: symlink loop at /%s", ErrBadImage, capName(strings.Join(append(w.done, c), "/")))
	}
	buf := make([]byte, maxPathBytes)
	n, err := unix.Readlinkat(w.cur, c, buf)
	if err != nil {
		return err
	}
	target := string(buf[:n])
	if strings.HasPrefix(target, "/") {
		fd, err := unix.Dup(w.rootFD)
		if err != nil {
			return err
		}
		w.step(fd)
		w.done = nil
	}
	w.todo = append(splitComponents(target), w.todo...)
	return nil
}
