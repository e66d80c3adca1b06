package files

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/codecage/codecage/internal/wsfs"
)

// The system tree is the host's (or an environment's), and the server
// reads it with its own rights, but to its files the sandbox's user is
// one of the others: the file API gives of it only what others may read,
// as the code itself would get. A directory others may not search hides
// what is below it; one they may not read is not listed; a file they may
// not read is not read (nor its metadata given).

// system reports whether m is part of the read-only system tree.
func (m *mount) system() bool { return m.host != "" && !m.writable && !m.workspace }

// othersMay checks that others may reach rel in m: search each directory
// on the way and, when read, read rel itself (a directory: read and
// search it). What is missing, or a link on the way (the next hop checks
// where it leads), is left to the operation.
func othersMay(m *mount, rel string, read bool) error {
	if !m.system() {
		return nil
	}
	var parts []string
	if rel != "." && rel != "" {
		parts = strings.Split(rel, "/")
	}
	at := m.host
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			at = filepath.Join(at, parts[i])
		}
		fi, err := os.Lstat(at)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		want := os.FileMode(0o001) // search
		if i == len(parts)-1 {
			switch {
			case !read:
			case fi.IsDir():
				want = 0o005
			default:
				want = 0o004
			}
		}
		if fi.IsDir() || i == len(parts)-1 {
			if fi.Mode().Perm()&want != want {
				return &os.PathError{Op: "open", Path: at, Err: syscall.EACCES}
			}
		}
	}
	return nil
}

// readableByOthers drops from a system mount's listing what lies below a
// directory others may not read and search.
func readableByOthers(entries []wsfs.Entry) []wsfs.Entry {
	var closed []string
	out := entries[:0]
	for _, e := range entries {
		hidden := false
		for _, c := range closed {
			if strings.HasPrefix(e.Path, c) {
				hidden = true
				break
			}
		}
		if hidden {
			continue
		}
		if e.Mode.IsDir() && e.Mode.Perm()&0o005 != 0o005 {
			closed = append(closed, e.Path+"/")
		}
		out = append(out, e)
	}
	return out
}
