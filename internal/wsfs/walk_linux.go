package wsfs

import (
	"context"
	"io/fs"
	"slices"

	"golang.org/x/sys/unix"
)

// List lists rel within lim: entries are stat'ed from their directory's
// descriptor, each directory opened from its parent's, so the work is
// bounded by lim whatever the shape of the tree.
func (r *Root) List(ctx context.Context, rel string, lim ListLimits) (Listing, error) {
	fd, err := openAt(r.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0, beneath)
	if err == unix.ENOTDIR {
		return Listing{}, pathErr("list", rel, ErrNotDir)
	}
	if err != nil {
		return Listing{}, pathErr("list", rel, err)
	}
	defer unix.Close(fd)
	w := walker{ctx: ctx, lim: lim, entries: []Entry{}}
	prefix := ""
	if rel != "." {
		prefix = rel + "/"
	}
	if err := w.dir(fd, prefix, 1); err != nil {
		return Listing{}, err
	}
	return Listing{Entries: w.entries, Truncated: w.truncated}, nil
}

// Usage sums the sizes of the regular files within maxDepth levels, at
// most maxEntries of them; it is for a workspace that is not a tmpfs of
// its own (Space is exact and O(1) for one that is).
func (r *Root) Usage(ctx context.Context, maxDepth, maxEntries int) (int64, error) {
	fd, err := openAt(r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return 0, pathErr("usage", ".", err)
	}
	defer unix.Close(fd)
	var n int64
	w := walker{ctx: ctx, lim: ListLimits{Depth: maxDepth, Entries: maxEntries, Bytes: 1 << 62}, visit: func(e *Entry) {
		if e.Mode.IsRegular() {
			n += e.Size
		}
	}}
	return n, w.dir(fd, "", 1)
}

type walker struct {
	ctx       context.Context
	lim       ListLimits
	visit     func(*Entry) // instead of collecting entries
	entries   []Entry
	buf       direntBuf
	count     int
	bytes     int
	truncated bool
}

func (w *walker) full() bool { return w.count >= w.lim.Entries || w.bytes > w.lim.Bytes }

// dir lists the directory open at fd, whose entries are at level.
func (w *walker) dir(fd int, prefix string, level int) error {
	names, err := readNames(fd, w.lim.Entries-w.count+1, &w.buf)
	if err != nil {
		return pathErr("list", prefix, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if w.full() {
			w.truncated = true
			return nil
		}
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue // removed meanwhile
		}
		e := entry(prefix+name, &st)
		if e.Mode&fs.ModeSymlink != 0 {
			e.Target = readlink(fd, name)
		}
		if w.bytes += len(e.Path) + len(e.Target); w.bytes > w.lim.Bytes {
			w.truncated = true
			return nil
		}
		w.count++
		if w.visit != nil {
			w.visit(&e)
		} else {
			w.entries = append(w.entries, e)
		}
		deeper := level >= w.lim.Depth
		if !e.Mode.IsDir() || deeper && (!w.lim.MarkDeeper || w.truncated) {
			continue
		}
		// O_NOFOLLOW and no symlinks: an entry swapped for a link since the
		// stat is skipped, never followed.
		sub, err := openAt(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
		if err != nil {
			continue
		}
		if deeper {
			more, _ := readNames(sub, 1, &w.buf)
			w.truncated = len(more) > 0
			unix.Close(sub)
			continue
		}
		err = w.dir(sub, e.Path+"/", level+1)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// direntBuf is one getdents buffer: a walk reuses one (a buffer per
// directory would make a deep walk a garbage collector's test).
type direntBuf [8 << 10]byte

// readNames reads up to max names of the directory open at fd (not "."
// or ".."), from where its offset is.
func readNames(fd, max int, b *direntBuf) ([]string, error) {
	var names []string
	buf := b[:]
	for len(names) < max {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], max-len(names), names)
	}
	return names, nil
}
