package wsfs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Unpack extracts a tar stream (as Archive writes it) into dir, which
// exists, empty or not; what it creates belongs to uid (and gid uid), or
// is left to root when uid is negative. Directories, regular files and
// symlinks are written with their permission bits (setuid, setgid and
// sticky stripped) and mtimes; an existing entry of the same name is
// replaced, unless one of them is a directory. It refuses, with an error
// wrapping ErrUnsafeEntry, an entry whose name is absolute or has a ".."
// or that would be written through a symlink (one already there or one
// the archive made), and hard links, devices, FIFOs and any other type;
// past a limit it stops with an error wrapping ErrArchiveLimit. Every
// path is resolved from dir with no symlink allowed, so nothing is ever
// written outside dir. A refused or interrupted unpack leaves a partial
// tree in dir: the caller removes the directory.
func Unpack(ctx context.Context, dir string, r io.Reader, uid int, lim ArchiveLimits) error {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return pathErr("unpack", dir, err)
	}
	defer unix.Close(root)
	u := &unpacker{ctx: ctx, lim: lim, uid: uid, root: root, pfd: -1, buf: make([]byte, 1<<20)}
	defer u.closeParent()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("unpack: %w", err)
		}
		if u.entries++; u.entries > lim.MaxEntries {
			return fmt.Errorf("unpack: %w: more than %d entries", ErrArchiveLimit, lim.MaxEntries)
		}
		if err := u.entry(h, tr); err != nil {
			return err
		}
	}
	return u.finishDirs()
}

type unpacker struct {
	ctx     context.Context
	lim     ArchiveLimits
	uid     int
	root    int
	entries int
	bytes   int64
	// pdir, open at pfd, is the last parent directory (entries come
	// grouped by directory).
	pdir string
	pfd  int
	dirs []dirMeta
	buf  []byte
}

// dirMeta: a directory's mode and mtime are set when all is written
// (writing its entries changes its mtime).
type dirMeta struct {
	rel   string
	mode  uint32
	mtime time.Time
}

func unsafe(name, why string) error {
	return fmt.Errorf("unpack: %w: %s: %s", ErrUnsafeEntry, quoteName(name), why)
}

// splitName checks an entry's name and splits it into its components.
func (u *unpacker) splitName(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return nil, unsafe(name, "absolute path")
	}
	if n := strings.Count(name, "/"); n > 2*u.lim.MaxDepth+2 {
		// Fail fast on a very deep name, before splitting it.
		return nil, fmt.Errorf("unpack: %w: %s is deeper than %d levels", ErrArchiveLimit, quoteName(name), u.lim.MaxDepth)
	}
	parts := strings.Split(name, "/")
	out := parts[:0]
	for _, p := range parts {
		switch p {
		case "", ".":
			continue
		case "..":
			return nil, unsafe(name, `path with ".."`)
		}
		out = append(out, p)
	}
	if len(out) > u.lim.MaxDepth {
		return nil, fmt.Errorf("unpack: %w: %s is deeper than %d levels", ErrArchiveLimit, quoteName(name), u.lim.MaxDepth)
	}
	return out, nil
}

func (u *unpacker) entry(h *tar.Header, tr *tar.Reader) error {
	parts, err := u.splitName(h.Name)
	if err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink:
	case tar.TypeLink:
		return unsafe(h.Name, "hard link")
	case tar.TypeChar, tar.TypeBlock:
		if !u.isWhiteout(h) {
			return unsafe(h.Name, "device")
		}
	case tar.TypeFifo:
		return unsafe(h.Name, "FIFO")
	default:
		return unsafe(h.Name, fmt.Sprintf("unsupported entry type %q", h.Typeflag))
	}
	if len(parts) == 0 {
		if h.Typeflag == tar.TypeDir {
			return nil // the root itself: dir is kept as it is
		}
		return unsafe(h.Name, "empty name")
	}
	pfd, err := u.parent(h.Name, parts[:len(parts)-1])
	if err != nil {
		return err
	}
	base, rel := parts[len(parts)-1], strings.Join(parts, "/")
	mode := uint32(h.Mode) & 0o777
	switch h.Typeflag {
	case tar.TypeDir:
		if err := u.mkdir(pfd, base, rel, h, mode); err != nil || !u.lim.Whiteouts || h.PAXRecords[paxOpaque] != "y" {
			return err
		}
		return u.opaque(pfd, base, rel)
	case tar.TypeChar:
		return u.whiteout(pfd, base, rel, h)
	case tar.TypeSymlink:
		return u.symlink(pfd, base, h)
	}
	return u.file(pfd, base, h, tr, mode)
}

// parent opens the directory whose components are dirs, making the
// missing ones, each resolved from its parent with no symlink allowed.
func (u *unpacker) parent(name string, dirs []string) (int, error) {
	rel := strings.Join(dirs, "/")
	if rel == "" {
		return u.root, nil
	}
	if u.pfd >= 0 && rel == u.pdir {
		return u.pfd, nil
	}
	fd, err := openAt(u.root, rel, unix.O_PATH|unix.O_DIRECTORY, 0, oneName)
	if err == unix.ENOENT {
		fd, err = u.makeDirs(dirs)
	}
	if err != nil {
		return -1, u.pathRefused(name, err)
	}
	u.closeParent()
	u.pdir, u.pfd = rel, fd
	return fd, nil
}

func (u *unpacker) makeDirs(dirs []string) (int, error) {
	cur := u.root
	for _, d := range dirs {
		next, err := openAt(cur, d, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
		if err == unix.ENOENT {
			if err := unix.Mkdirat(cur, d, 0o755); err != nil && err != unix.EEXIST {
				return -1, err
			}
			next, err = openAt(cur, d, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
			if err == nil && u.uid >= 0 {
				err = unix.Fchownat(next, "", u.uid, u.uid, unix.AT_EMPTY_PATH)
			}
		}
		if cur != u.root {
			unix.Close(cur)
		}
		if err != nil {
			if next >= 0 {
				unix.Close(next)
			}
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

func (u *unpacker) closeParent() {
	if u.pfd >= 0 {
		unix.Close(u.pfd)
		u.pfd, u.pdir = -1, ""
	}
}

// pathRefused explains why a path could not be reached or written.
func (u *unpacker) pathRefused(name string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return unsafe(name, "path through a symlink")
	case errors.Is(err, unix.ENOTDIR):
		return unsafe(name, "path through something that is not a directory")
	case errors.Is(err, unix.EXDEV):
		return unsafe(name, "path leaves the directory")
	}
	return fmt.Errorf("unpack: %s: %w", quoteName(name), err)
}

func (u *unpacker) mkdir(pfd int, base, rel string, h *tar.Header, mode uint32) error {
	err := unix.Mkdirat(pfd, base, 0o700)
	if err != nil && err != unix.EEXIST {
		return u.pathRefused(rel, err)
	}
	fd, err := openAt(pfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
	if isErrno(err, unix.ENOTDIR, unix.ELOOP) {
		return unsafe(rel, "exists and is not a directory")
	}
	if err != nil {
		return u.pathRefused(rel, err)
	}
	defer unix.Close(fd)
	if u.uid >= 0 {
		uid, gid := u.ownerOf(h)
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
			return pathErr("unpack", rel, err)
		}
	}
	u.dirs = append(u.dirs, dirMeta{rel: rel, mode: mode, mtime: h.ModTime})
	return nil
}

// ownerOf is who an entry belongs to: u.uid, or with ArchiveLimits.Owners
// the owner its record names, as offsets from u.uid within the window.
func (u *unpacker) ownerOf(h *tar.Header) (uid, gid int) {
	rec, ok := h.PAXRecords[paxOwner]
	if !ok || u.lim.Owners.Max <= u.lim.Owners.Min {
		return u.uid, u.uid
	}
	us, gs, _ := strings.Cut(rec, ":")
	du, err1 := strconv.Atoi(us)
	dg, err2 := strconv.Atoi(gs)
	if err1 != nil || err2 != nil || !u.lim.Owners.holds(du) || !u.lim.Owners.holds(dg) {
		return u.uid, u.uid
	}
	return u.uid + du, u.uid + dg
}

// isWhiteout reports whether h is an overlay's whiteout that u keeps.
func (u *unpacker) isWhiteout(h *tar.Header) bool {
	return u.lim.Whiteouts && h.Typeflag == tar.TypeChar && h.Devmajor == 0 && h.Devminor == 0
}

// whiteout makes the character device 0/0 an overlay reads as a removed
// entry (no device: opening it fails). Without the right to make one (a
// rootless server, whose machines have no overlay), it is left out.
func (u *unpacker) whiteout(pfd int, base, rel string, h *tar.Header) error {
	err := unix.Mknodat(pfd, base, unix.S_IFCHR, 0)
	if err == unix.EEXIST {
		if err = replaceable(pfd, base); err == nil {
			err = unix.Mknodat(pfd, base, unix.S_IFCHR, 0)
		}
	}
	switch {
	case err == unix.EPERM:
		return nil
	case err != nil:
		return u.pathRefused(rel, err)
	case u.uid >= 0:
		uid, gid := u.ownerOf(h)
		return pathErr("unpack", rel, unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW))
	}
	return nil
}

// opaque marks the directory base, just made, as an overlay's opaque one.
func (u *unpacker) opaque(pfd int, base, rel string) error {
	fd, err := openAt(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
	if err != nil {
		return u.pathRefused(rel, err)
	}
	defer unix.Close(fd)
	return pathErr("unpack", rel, unix.Fsetxattr(fd, overlayOpaque, []byte("y"), 0))
}

// replaceable makes room for a new entry base: an existing one that is not
// a directory is removed (a symlink itself, never its target).
func replaceable(pfd int, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.EISDIR
	}
	return unix.Unlinkat(pfd, base, 0)
}

func (u *unpacker) symlink(pfd int, base string, h *tar.Header) error {
	name, target, mtime := h.Name, h.Linkname, h.ModTime
	if target == "" || len(target) >= unix.PathMax || strings.IndexByte(target, 0) >= 0 {
		return unsafe(name, "symlink target empty or too long")
	}
	err := unix.Symlinkat(target, pfd, base)
	if err == unix.EEXIST {
		if err = replaceable(pfd, base); err == nil {
			err = unix.Symlinkat(target, pfd, base)
		}
	}
	if err != nil {
		return u.pathRefused(name, err)
	}
	if u.uid >= 0 {
		uid, gid := u.ownerOf(h)
		if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathErr("unpack", name, err)
		}
	}
	return pathErr("unpack", name, setTimes(pfd, base, mtime, unix.AT_SYMLINK_NOFOLLOW))
}

func (u *unpacker) file(pfd int, base string, h *tar.Header, tr *tar.Reader, mode uint32) error {
	if h.Size > u.lim.MaxBytes-u.bytes {
		return fmt.Errorf("unpack: %w: more than %d bytes of files (at %s)", ErrArchiveLimit, u.lim.MaxBytes, quoteName(h.Name))
	}
	u.bytes += h.Size
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_NOCTTY
	fd, err := openAt(pfd, base, flags, 0o600, oneName)
	if err == unix.EEXIST {
		if err = replaceable(pfd, base); err == nil {
			fd, err = openAt(pfd, base, flags, 0o600, oneName)
		}
	}
	if err != nil {
		return u.pathRefused(h.Name, err)
	}
	defer unix.Close(fd)
	for {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		n, err := tr.Read(u.buf)
		if n > 0 {
			if _, werr := writeAll(fd, u.buf[:n]); werr != nil {
				return pathErr("unpack", h.Name, werr)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("unpack: %s: %w", quoteName(h.Name), err)
		}
	}
	// chown before chmod: chown clears the setuid bits, chmod then sets
	// only permission bits.
	if u.uid >= 0 {
		uid, gid := u.ownerOf(h)
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return pathErr("unpack", h.Name, err)
		}
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return pathErr("unpack", h.Name, err)
	}
	if err := u.metadata(fd, h); err != nil {
		return pathErr("unpack", h.Name, err)
	}
	return pathErr("unpack", h.Name, setTimes(fd, "", h.ModTime, unix.AT_EMPTY_PATH))
}

// metadata restores the user.e2b.* attributes h carries, within the
// limits and rules a write's metadata has (an archive may be anyone's).
func (u *unpacker) metadata(fd int, h *tar.Header) error {
	if u.lim.Metadata.Keys <= 0 {
		return nil
	}
	var md map[string]string
	for k, v := range h.PAXRecords {
		if key, ok := strings.CutPrefix(k, paxMetadata); ok {
			if md == nil {
				md = map[string]string{}
			}
			if len(md) > 4*u.lim.Metadata.Keys {
				break
			}
			md[key] = v
		}
	}
	md = keepMetadata(md, u.lim.Metadata)
	if md == nil {
		return nil
	}
	err := SetMetadataFD(fd, md)
	if isErrno(err, unix.ENOTSUP) {
		return nil // a filesystem without user attributes: the files still come back
	}
	return err
}

func writeAll(fd int, b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Write(fd, b[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

func setTimes(fd int, name string, t time.Time, flags int) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.UtimesNanoAt(fd, name, []unix.Timespec{ts, ts}, flags)
}

// finishDirs sets the directories' modes and mtimes, each reopened from
// the root with no symlink allowed.
func (u *unpacker) finishDirs() error {
	u.closeParent()
	for _, d := range u.dirs {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		fd, err := openAt(u.root, d.rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
		if err != nil {
			return u.pathRefused(d.rel, err)
		}
		err = unix.Fchmod(fd, d.mode)
		if err == nil {
			err = setTimes(fd, "", d.mtime, unix.AT_EMPTY_PATH)
		}
		unix.Close(fd)
		if err != nil {
			return pathErr("unpack", d.rel, err)
		}
	}
	return nil
}
