package wsfs

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Archive writes the tree under dir to w as a tar stream: directories,
// regular files, symlinks as links (their text, never followed),
// permission bits and mtimes (to the second); FIFOs, sockets and devices
// are left out and named in the report. Each entry is opened from its
// directory's descriptor with no symlink allowed (an entry swapped for a
// link between the listing and the open is skipped, never followed), so
// it never leaves dir. It stops with an error (wrapping ErrArchiveLimit)
// past a limit, or when ctx ends; w then holds a partial stream. dir's
// own mode and mtime are not archived. It holds one descriptor per level
// of depth (MaxDepth bounds them).
func Archive(ctx context.Context, dir string, w io.Writer, lim ArchiveLimits) (ArchiveReport, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ArchiveReport{}, pathErr("archive", dir, err)
	}
	defer unix.Close(fd)
	a := &archiver{ctx: ctx, lim: lim, tw: tar.NewWriter(w), buf: make([]byte, 1<<20)}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ArchiveReport{}, pathErr("archive", dir, err)
	}
	a.owner = int(st.Uid)
	if err := a.dir(fd, "", 1); err != nil {
		return a.rep, err
	}
	return a.rep, a.tw.Close()
}

type archiver struct {
	ctx   context.Context
	lim   ArchiveLimits
	tw    *tar.Writer
	rep   ArchiveReport
	seen  int
	names direntBuf
	buf   []byte
	owner int // the directory's owner (ArchiveLimits.Owners)
}

// dir archives the entries of the directory open at fd, which are at level.
func (a *archiver) dir(fd int, prefix string, level int) error {
	names, err := readNames(fd, a.lim.MaxEntries-a.seen+1, &a.names)
	if err != nil {
		return pathErr("archive", prefix, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		rel := prefix + name
		if a.seen++; a.seen > a.lim.MaxEntries {
			return fmt.Errorf("archive: %w: more than %d entries", ErrArchiveLimit, a.lim.MaxEntries)
		}
		if level > a.lim.MaxDepth {
			return fmt.Errorf("archive: %w: %s is deeper than %d levels", ErrArchiveLimit, quoteName(rel), a.lim.MaxDepth)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed meanwhile
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = a.subdir(fd, name, rel, level)
		case unix.S_IFREG:
			err = a.file(fd, name, rel)
		case unix.S_IFLNK:
			err = a.symlink(fd, name, rel, &st)
		case unix.S_IFCHR:
			if !a.lim.Whiteouts || st.Rdev != 0 {
				a.rep.skip(rel, kind(st.Mode))
				break
			}
			err = a.header(&tar.Header{Typeflag: tar.TypeChar, Name: rel}, &st) // a whiteout
		default:
			a.rep.skip(rel, kind(st.Mode))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (a *archiver) subdir(fd int, name, rel string, level int) error {
	sub, err := openAt(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
	if err != nil {
		return a.gone(rel, err)
	}
	defer unix.Close(sub)
	var st unix.Stat_t
	if err := unix.Fstat(sub, &st); err != nil {
		return pathErr("archive", rel, err)
	}
	h := &tar.Header{Typeflag: tar.TypeDir, Name: rel + "/"}
	if a.lim.Whiteouts && isOpaque(sub) {
		h.PAXRecords = map[string]string{paxOpaque: "y"}
	}
	if err := a.header(h, &st); err != nil {
		return err
	}
	return a.dir(sub, rel+"/", level+1)
}

func (a *archiver) file(fd int, name, rel string) error {
	// O_NONBLOCK: an entry swapped for a FIFO opens without waiting for a
	// writer (and is then skipped by the fstat below).
	f, err := openAt(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0, oneName)
	if err != nil {
		return a.gone(rel, err)
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return pathErr("archive", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		a.rep.skip(rel, kind(st.Mode))
		return nil
	}
	if st.Size > a.lim.MaxBytes-a.rep.Bytes {
		return fmt.Errorf("archive: %w: more than %d bytes of files (at %s)", ErrArchiveLimit, a.lim.MaxBytes, quoteName(rel))
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: st.Size}
	if md := keepMetadata(readMetadata(f, MetaLimits{Keys: 4 * a.lim.Metadata.Keys, Bytes: 2 * a.lim.Metadata.Bytes}), a.lim.Metadata); md != nil {
		h.PAXRecords = make(map[string]string, len(md))
		for k, v := range md {
			h.PAXRecords[paxMetadata+k] = v
		}
	}
	if err := a.header(h, &st); err != nil {
		return err
	}
	a.rep.Bytes += st.Size
	// Exactly Size bytes: a file the code truncates meanwhile is padded
	// with zeros, one it extends is cut at the size it had.
	for left := st.Size; left > 0; {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		n, err := unix.Read(f, a.buf[:min(left, int64(len(a.buf)))])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return pathErr("archive", rel, err)
		}
		if n == 0 {
			clear(a.buf[:min(left, int64(len(a.buf)))])
			n = int(min(left, int64(len(a.buf))))
		}
		if _, err := a.tw.Write(a.buf[:n]); err != nil {
			return err
		}
		left -= int64(n)
	}
	return nil
}

func (a *archiver) symlink(fd int, name, rel string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return a.gone(rel, err)
	}
	return a.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: rel, Linkname: string(buf[:n])}, st)
}

func (a *archiver) header(h *tar.Header, st *unix.Stat_t) error {
	h.Mode = int64(st.Mode & 0o777)
	h.ModTime = time.Unix(st.Mtim.Sec, 0)
	if du, dg := int(st.Uid)-a.owner, int(st.Gid)-a.owner; (du != 0 || dg != 0) && a.lim.Owners.holds(du) && a.lim.Owners.holds(dg) {
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords[paxOwner] = strconv.Itoa(du) + ":" + strconv.Itoa(dg)
	}
	a.rep.Entries++
	return a.tw.WriteHeader(h)
}

// gone: an entry removed since the listing is left out silently, one that
// changed kind (a swap for a link) is left out and named.
func (a *archiver) gone(rel string, err error) error {
	switch {
	case err == unix.ENOENT:
		return nil
	case isErrno(err, unix.ELOOP, unix.ENOTDIR, unix.EINVAL, unix.ENXIO):
		a.rep.skip(rel, "changed while archived")
		return nil
	}
	return pathErr("archive", rel, err)
}

func kind(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	case unix.S_IFDIR:
		return "changed to a directory"
	}
	return "unsupported file type"
}

// isOpaque reports whether the directory open at fd is an overlay's
// opaque one.
func isOpaque(fd int) bool {
	var v [2]byte
	n, err := unix.Fgetxattr(fd, overlayOpaque, v[:])
	return err == nil && n == 1 && v[0] == 'y'
}
