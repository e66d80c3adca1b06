package wsfs

import (
	"context"
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
	err = empty(ctx, fd)
	unix.Close(fd)
	if err != nil {
		return pathErr("remove", rel, err)
	}
	return pathErr("remove", rel, ignoreGone(unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)))
}

// empty removes what the directory open at fd holds.
func empty(ctx context.Context, fd int) error {
	var moved uint64
	for {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return err
		}
		names, err := readNames(fd, 1024)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		for _, name := range names {
			if err := ctx.Err(); err != nil {
				return err
			}
			err := unix.Unlinkat(fd, name, 0)
			if err == unix.EISDIR {
				err = unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
				if isErrno(err, unix.ENOTEMPTY, unix.EEXIST) {
					err = hoist(fd, name, &moved)
				}
			}
			if err = ignoreGone(err); err != nil {
				return err
			}
		}
	}
}

// hoist moves the entries of fd's subdirectory name up into fd, under
// names of their own; name, then empty, goes on the next round.
func hoist(fd int, name string, moved *uint64) error {
	sub, err := openAt(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, oneName)
	if err != nil {
		return err
	}
	defer unix.Close(sub)
	children, err := readNames(sub, 1024)
	if err != nil {
		return err
	}
	for _, child := range children {
		for {
			*moved++
			err := unix.Renameat2(sub, child, fd, ".codecage-rm-"+strconv.FormatUint(*moved, 36), unix.RENAME_NOREPLACE)
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

// ignoreGone: an entry removed meanwhile (by the code) is as good as removed.
func ignoreGone(err error) error {
	if err == unix.ENOENT {
		return nil
	}
	return err
}
