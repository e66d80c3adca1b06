package envstore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// unpacker applies layers onto a root directory. Every entry's parent is
// opened with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, so neither
// "..", an absolute name, nor a symlink a layer planted can carry a write
// out of the root; the last component is created with *at calls that do
// not follow links either.
type unpacker struct {
	root  int // O_PATH fd of the root
	lim   Limits
	log   io.Writer
	bytes int64
	// entries counts tar entries over all layers.
	entries int64
	// layer holds the paths the current layer made: its whiteouts and
	// opaque markers apply to lower layers only.
	layer   map[string]bool
	skipped int
	// cache is the last parent directory opened, reused while entries
	// stay in it (dropped at every removal, which could replace it).
	cacheDir string
	cacheFD  int
	// stale marks the cache for dropping at the next lookup (a removal
	// happened; the current entry may still use the fd).
	stale   bool
	copyBuf []byte
}

const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

func newUnpacker(root string, lim Limits, log io.Writer) (*unpacker, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("envstore: open root: %w", err)
	}
	return &unpacker{root: fd, lim: lim, log: log, cacheFD: -1, copyBuf: make([]byte, 256<<10)}, nil
}

func (u *unpacker) close() {
	u.dropCache()
	unix.Close(u.root)
}

func (u *unpacker) dropCache() {
	if u.cacheFD >= 0 {
		unix.Close(u.cacheFD)
	}
	u.cacheFD, u.cacheDir = -1, ""
}

// apply unpacks one layer's tar.
func (u *unpacker) apply(ctx context.Context, r io.Reader, label string) error {
	u.layer = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if errors.Is(err, ErrBadImage) {
				return err
			}
			return fmt.Errorf("%w: %s: truncated or corrupt tar: %v", ErrBadImage, label, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		u.entries++
		if u.entries > u.lim.MaxEntries {
			return fmt.Errorf("%w: %s: over %d entries", ErrBadImage, label, u.lim.MaxEntries)
		}
		if err := u.entry(tr, hdr); err != nil {
			if errors.Is(err, ErrBadImage) {
				return err
			}
			return fmt.Errorf("%w: %s: entry %q: %v", ErrBadImage, label, capName(hdr.Name), err)
		}
	}
}

// entry applies one tar entry; errors name the reason, apply adds the entry.
func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header) error {
	p, err := entryPath(hdr.Name, u.lim.MaxPathDepth)
	if err != nil {
		return err
	}
	if p == "" {
		return nil // the root itself: its mode is the store's to set
	}
	dir, base := splitPath(p)
	if base == opaqueMarker {
		return u.opaque(dir)
	}
	if len(base) > len(whiteoutPrefix) && base[:len(whiteoutPrefix)] == whiteoutPrefix {
		return u.whiteout(dir, base[len(whiteoutPrefix):])
	}
	if base == whiteoutPrefix {
		return errors.New("whiteout of nothing")
	}
	perm := uint32(hdr.Mode) & 0o1777 // setuid and setgid never land
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		u.skip(p, "device node")
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	}
	parent, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	u.layer[p] = true
	switch hdr.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := u.removeAt(parent, base); err != nil {
				return err
			}
			err = unix.ENOENT
		}
		if err == unix.ENOENT {
			if err := unix.Mkdirat(parent, base, 0o700); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		return unix.Fchmodat(parent, base, perm, 0)
	case tar.TypeReg, tar.TypeRegA:
		if hdr.Size < 0 || hdr.Size > u.lim.MaxBytes-u.bytes {
			return fmt.Errorf("claims %d bytes, past the image's cap of %d (%d used)", hdr.Size, u.lim.MaxBytes, u.bytes)
		}
		if err := u.replace(parent, base); err != nil {
			return err
		}
		return u.writeFile(parent, base, perm, tr, hdr.Size)
	case tar.TypeSymlink:
		if hdr.Linkname == "" || len(hdr.Linkname) > maxPathBytes {
			return errors.New("symlink target empty or too long")
		}
		if err := u.replace(parent, base); err != nil {
			return err
		}
		return unix.Symlinkat(hdr.Linkname, parent, base)
	case tar.TypeLink:
		return u.hardLink(parent, base, p, hdr.Linkname)
	case tar.TypeFifo:
		if err := u.replace(parent, base); err != nil {
			return err
		}
		return unix.Mknodat(parent, base, unix.S_IFIFO|perm, 0)
	}
	return fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
}

// writeFile creates base in parent (never through a link) with size
// bytes from r.
func (u *unpacker) writeFile(parent int, base string, perm uint32, r io.Reader, size int64) error {
	fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	n, err := io.CopyBuffer(f, io.LimitReader(r, size), u.copyBuf)
	u.bytes += n
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("truncated: the tar ends %d bytes into a %d-byte file", n, size)
	}
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("truncated: %d of %d bytes", n, size)
	}
	return f.Chmod(os.FileMode(perm&0o777) | stickyOf(perm))
}

func stickyOf(perm uint32) os.FileMode {
	if perm&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

// hardLink links base to target, a non-directory already in the root,
// reached without following any symlink.
func (u *unpacker) hardLink(parent int, base, p, linkname string) error {
	target, err := entryPath(linkname, u.lim.MaxPathDepth)
	if err != nil {
		return fmt.Errorf("hard link to %q outside the root: %v", capName(linkname), err)
	}
	if target == "" || target == p {
		return fmt.Errorf("hard link to %q", capName(linkname))
	}
	tdir, tbase := splitPath(target)
	tparent, err := u.open(tdir)
	if err != nil {
		return fmt.Errorf("hard link target %q: %v", capName(linkname), err)
	}
	defer unix.Close(tparent)
	var st unix.Stat_t
	if err := unix.Fstatat(tparent, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hard link target %q: %v", capName(linkname), err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("hard link to directory %q", capName(linkname))
	}
	if err := u.replace(parent, base); err != nil {
		return err
	}
	u.layer[p] = true
	return unix.Linkat(tparent, tbase, parent, base, 0)
}

// whiteout removes name from dir, unless this layer made it.
func (u *unpacker) whiteout(dir, name string) error {
	if name == "." || name == ".." {
		return fmt.Errorf("whiteout of %q", name)
	}
	if len(name) >= len(whiteoutPrefix) && name[:len(whiteoutPrefix)] == whiteoutPrefix {
		return nil // AUFS metadata (.wh..wh.plnk and the like): nothing to apply
	}
	if u.layer[path.Join(dir, name)] {
		return nil
	}
	parent, err := u.parent(dir, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	return u.removeAt(parent, name)
}

// opaque empties dir of what lower layers put there.
func (u *unpacker) opaque(dir string) error {
	fd, err := u.open(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !u.layer[path.Join(dir, n)] {
			if err := u.removeAt(fd, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// parent returns an fd of dir (cached: the caller does not close it),
// creating missing directories when create is set.
func (u *unpacker) parent(dir string, create bool) (int, error) {
	if dir == "" {
		return u.root, nil
	}
	if u.stale {
		u.dropCache()
		u.stale = false
	}
	if u.cacheFD >= 0 && u.cacheDir == dir {
		return u.cacheFD, nil
	}
	fd, err := u.open(dir)
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = u.mkdirs(dir)
	}
	if err != nil {
		return -1, err
	}
	u.dropCache()
	u.cacheFD, u.cacheDir = fd, dir
	return fd, nil
}

// open opens dir beneath the root, refusing any symlink on the way.
func (u *unpacker) open(dir string) (int, error) {
	if dir == "" {
		return unix.Dup(u.root)
	}
	fd, err := unix.Openat2(u.root, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: resolveBeneath,
	})
	switch {
	case err == unix.ELOOP:
		return -1, fmt.Errorf("parent %q passes through a symlink", capName(dir))
	case err == unix.ENOTDIR:
		return -1, fmt.Errorf("parent %q is not a directory", capName(dir))
	case err == unix.EXDEV:
		return -1, fmt.Errorf("parent %q leaves the root", capName(dir))
	}
	return fd, err
}

// mkdirs makes each missing directory of dir (0755), never following a
// symlink, and returns an fd of the last.
func (u *unpacker) mkdirs(dir string) (int, error) {
	cur, err := unix.Dup(u.root)
	if err != nil {
		return -1, err
	}
	rest := dir
	for rest != "" {
		var name string
		if i := indexSlash(rest); i >= 0 {
			name, rest = rest[:i], rest[i+1:]
		} else {
			name, rest = rest, ""
		}
		if err := unix.Mkdirat(cur, name, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(cur)
			return -1, err
		}
		next, err := unix.Openat2(cur, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: resolveBeneath,
		})
		unix.Close(cur)
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return -1, fmt.Errorf("parent %q passes through a symlink or a file", capName(dir))
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

func indexSlash(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// replace clears the way for a new entry named base in parent.
func (u *unpacker) replace(parent int, base string) error {
	err := unix.Unlinkat(parent, base, 0)
	switch err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR:
		return u.removeAt(parent, base)
	}
	return err
}

// removeAt removes name under parent and, for a directory, all it holds,
// without following links.
func (u *unpacker) removeAt(parent int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(parent, name, 0)
	}
	u.stale = true // the cached parent may be this directory or under it
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readNames(fd)
	if err == nil {
		for _, n := range names {
			if err = u.removeAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
}

// readNames lists a directory fd's entries (O_PATH fds are reopened).
func readNames(fd int) ([]string, error) {
	rd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(rd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// skip logs an entry left out (the first few by name, then a count).
func (u *unpacker) skip(p, what string) {
	u.skipped++
	if u.skipped <= 5 {
		fmt.Fprintf(u.log, "skipped %s %q (an environment holds none)\n", what, capName(p))
	} else if u.skipped == 6 {
		fmt.Fprintf(u.log, "skipping further device nodes silently\n")
	}
}
