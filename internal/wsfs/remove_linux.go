package wsfs

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"

	"golang.org/x/sys/unix"
)

// RemoveAll removes rel, and all below it when it is a directory. It holds
// two descriptors whatever the depth: a directory that is not empty has
// its entries moved up into the one being emptied (each entry moves at
// most once), so a tree thousands of levels deep costs what its entries
// do. It stops, leaving part of the tree, when ctx ends.
func (r *Root) RemoveAll(ctx context.Context, rel string) error {
	pfd, name, err := r.parent("remove", rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("remove", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return pathErr("remove", rel, ignoreGone(unix.Unlinkat(pfd, name, 0)))
	}
	fd, err := openAt(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
	if err != nil {
		return pathErr("remove", rel, err)
	}
	err = (&remover{ctx: ctx, fd: fd}).empty()
	unix.Close(fd)
	if err != nil {
		return pathErr("remove", rel, err)
	}
	return pathErr("remove", rel, ignoreGone(unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)))
}

// remover empties the directory open at fd.
type remover struct {
	ctx   context.Context
	fd    int
	moved uint64
	// buf reads the directory being emptied, sub the one being moved up.
	buf, sub direntBuf
}

func (m *remover) empty() error {
	// Read on while entries come (those moved up land further on); when
	// none does, read again from the start, and stop when that finds none.
	changed := false
	for {
		if err := m.ctx.Err(); err != nil {
			return err
		}
		n, err := unix.Getdents(m.fd, m.buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 { // the end of the directory
			if !changed {
				return nil
			}
			if _, err := unix.Seek(m.fd, 0, 0); err != nil {
				return err
			}
			changed = false
			continue
		}
		for _, e := range dirents(m.buf[:n]) {
			if err := m.ctx.Err(); err != nil {
				return err
			}
			changed = true
			if err := m.remove(e); err != nil {
				return err
			}
		}
	}
}

// remove removes one entry of m.fd, or, a directory that is not empty,
// moves its entries up and removes it if that emptied it.
func (m *remover) remove(e dirent) error {
	if e.typ != unix.DT_DIR {
		err := unix.Unlinkat(m.fd, e.name, 0)
		if err != unix.EISDIR || e.typ != unix.DT_UNKNOWN {
			return ignoreGone(err)
		}
	}
	err := unix.Unlinkat(m.fd, e.name, unix.AT_REMOVEDIR)
	if err != unix.ENOTEMPTY && err != unix.EEXIST {
		return ignoreGone(err)
	}
	if err := m.hoist(e.name); err != nil {
		return ignoreGone(err)
	}
	if err := unix.Unlinkat(m.fd, e.name, unix.AT_REMOVEDIR); err != unix.ENOTEMPTY && err != unix.EEXIST {
		return ignoreGone(err)
	}
	return nil // more than one read's worth: the next pass moves the rest
}

// hoist moves (one read's worth of) the entries of m.fd's subdirectory
// name up into m.fd, under names of their own.
func (m *remover) hoist(name string) error {
	sub, err := openAt(m.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
	if err != nil {
		return err
	}
	defer unix.Close(sub)
	n, err := unix.Getdents(sub, m.sub[:])
	if err != nil {
		return err
	}
	for _, child := range dirents(m.sub[:max(n, 0)]) {
		for {
			m.moved++
			err := unix.Renameat2(sub, child.name, m.fd, ".codecage-rm-"+strconv.FormatUint(m.moved, 36), unix.RENAME_NOREPLACE)
			if err == unix.EEXIST {
				continue
			}
			if err = ignoreGone(err); err != nil {
				return err
			}
			break
		}
	}
	return nil
}

type dirent struct {
	name string
	typ  uint8
}

// dirents parses what getdents64 read (linux_dirent64 records), "." and
// ".." left out.
func dirents(b []byte) []dirent {
	var out []dirent
	for len(b) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			break
		}
		name := b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if s := string(name); s != "." && s != ".." {
			out = append(out, dirent{name: s, typ: b[18]})
		}
		b = b[reclen:]
	}
	return out
}

// ignoreGone: an entry removed meanwhile (by the code) is as good as removed.
func ignoreGone(err error) error {
	if err == unix.ENOENT {
		return nil
	}
	return err
}
