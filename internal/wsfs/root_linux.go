package wsfs

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Root is an open workspace: every path given to its methods is clean,
// relative, and resolved beneath it.
type Root struct{ fd int }

const (
	// beneath: a path (symlinks included) never leaves the directory it is
	// resolved from, never crosses a mount, never follows /proc magic links.
	beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
	// oneName: one entry of a directory opened by descriptor, which must not
	// be a symlink (a swap under a walk is refused, not followed).
	oneName = beneath | unix.RESOLVE_NO_SYMLINKS
)

// Open opens the workspace at dir.
func Open(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Root{fd: fd}, nil
}

// Close closes the workspace.
func (r *Root) Close() error { return unix.Close(r.fd) }

// openAt resolves name beneath dirfd in one openat2.
func openAt(dirfd int, name string, flags int, mode uint32, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(dirfd, name, &how)
		// EAGAIN: a rename raced the kernel's check of a "..": try again.
		if (err == unix.EAGAIN || err == unix.EINTR) && tries < 100 {
			continue
		}
		return fd, err
	}
}

func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// OpenFile opens rel; symlinks are followed only while they stay inside.
func (r *Root) OpenFile(rel string, flag int, perm uint32) (*os.File, error) {
	fd, err := openAt(r.fd, rel, flag, perm, beneath)
	if err != nil {
		return nil, pathErr("open", rel, err)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// Lstat describes rel (a symlink itself, not its target).
func (r *Root) Lstat(rel string) (Entry, error) {
	fd, err := openAt(r.fd, rel, unix.O_PATH|unix.O_NOFOLLOW, 0, beneath)
	if err != nil {
		return Entry{}, pathErr("lstat", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Entry{}, pathErr("lstat", rel, err)
	}
	e := entry(rel, &st)
	if e.Mode&fs.ModeSymlink != 0 {
		e.Target = readlink(fd, "")
	}
	return e, nil
}

// MkdirAll makes rel and its missing parents (perm, then given to uid
// unless it is negative); it reports whether it made any.
func (r *Root) MkdirAll(rel string, perm uint32, uid int) (bool, error) {
	fd, err := openAt(r.fd, rel, unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
	if err == nil {
		unix.Close(fd)
		return false, nil
	}
	if err != unix.ENOENT {
		return false, pathErr("mkdir", rel, err)
	}
	// Usually only the last few components are missing: find the deepest
	// one that is there within a few tries (each one openat2), else start
	// from the root. Then one component at a time, each resolved from its
	// parent's descriptor: linear in the path's length.
	cur, created, base := r.fd, false, ""
	defer func() {
		if cur != r.fd {
			unix.Close(cur)
		}
	}()
	for dir, tries := path.Dir(rel), 0; dir != "." && tries < 8; dir, tries = path.Dir(dir), tries+1 {
		fd, err := openAt(r.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
		if err == nil {
			cur, base = fd, dir
			break
		}
		if err != unix.ENOENT {
			return false, pathErr("mkdir", rel, err)
		}
	}
	missing := rel
	if base != "" {
		missing = rel[len(base)+1:]
	}
	for _, name := range strings.Split(missing, "/") {
		if name == "" || name == "." || name == ".." {
			return created, pathErr("mkdir", rel, unix.EINVAL)
		}
		next, err := openAt(cur, name, unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
		if err == unix.ENOENT {
			made := unix.Mkdirat(cur, name, perm)
			if made != nil && made != unix.EEXIST {
				return created, pathErr("mkdir", rel, made)
			}
			next, err = openAt(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
			if err == nil && made == nil {
				created = true
				if uid >= 0 {
					_ = unix.Fchownat(next, "", uid, uid, unix.AT_EMPTY_PATH)
				}
			}
		}
		if err != nil {
			return created, pathErr("mkdir", rel, err)
		}
		if cur != r.fd {
			unix.Close(cur)
		}
		cur = next
	}
	return created, nil
}

// parent opens the directory holding rel (O_PATH) and returns rel's name.
func (r *Root) parent(op, rel string) (int, string, error) {
	if rel == "." || rel == "" {
		return -1, "", pathErr(op, rel, unix.EINVAL)
	}
	fd, err := openAt(r.fd, path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return -1, "", pathErr(op, rel, err)
	}
	return fd, path.Base(rel), nil
}

// Rename moves src to dst, whose parent must exist; a symlink is moved,
// not followed.
func (r *Root) Rename(src, dst string) error {
	sfd, sname, err := r.parent("rename", src)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	dfd, dname, err := r.parent("rename", dst)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return pathErr("rename", dst, unix.Renameat(sfd, sname, dfd, dname))
}

// Space is what the workspace's file system holds and still has room
// for, in bytes: the quota itself when the workspace is a tmpfs of its own.
func (r *Root) Space() (used, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(r.fd, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

func readlink(dirfd int, name string) string {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func entry(p string, st *unix.Stat_t) Entry {
	return Entry{Path: p, Size: st.Size, Mode: fileMode(st.Mode), ModTime: time.Unix(st.Mtim.Unix()).UTC()}
}

func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// isErrno reports whether err is one of errs.
func isErrno(err error, errs ...unix.Errno) bool {
	for _, e := range errs {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
