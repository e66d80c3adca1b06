package wsfs

import (
	"strings"

	"golang.org/x/sys/unix"
)

// FirstLink walks rel one component at a time, each opened from its
// parent's descriptor without following any symlink, and reports the
// first component that is a symlink: its path (relative to the root) and
// its target. It reports "" when none is, including when rel stops
// existing before one (what follows cannot be a link yet). The walk is
// linear in rel's length, whatever the code planted.
func (r *Root) FirstLink(rel string) (link, target string, err error) {
	if rel == "." || rel == "" {
		return "", "", nil
	}
	cur := r.fd
	defer func() {
		if cur != r.fd {
			unix.Close(cur)
		}
	}()
	done := 0
	for _, name := range strings.Split(rel, "/") {
		if name == "" || name == "." || name == ".." {
			return "", "", pathErr("walk", rel, unix.EINVAL)
		}
		next, err := openAt(cur, name, unix.O_PATH|unix.O_NOFOLLOW, 0, oneName)
		if err == unix.ENOENT {
			return "", "", nil
		}
		if err != nil {
			return "", "", pathErr("walk", rel, err)
		}
		done += len(name) + 1
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return "", "", pathErr("walk", rel, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			t := readlink(next, "")
			unix.Close(next)
			return rel[:done-1], t, nil
		}
		if cur != r.fd {
			unix.Close(cur)
		}
		cur = next
	}
	return "", "", nil
}
