package wsfs

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CreateTemp creates a new file in the directory dir (which must exist),
// named prefix and random letters, for writing; it returns the file and
// its path. It never replaces or follows anything already there.
func (r *Root) CreateTemp(dir, prefix string, perm uint32) (*os.File, string, error) {
	dfd, err := openAt(r.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0, beneath)
	if err != nil {
		return nil, "", pathErr("create", dir, err)
	}
	defer unix.Close(dfd)
	for tries := 0; ; tries++ {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := prefix + hex.EncodeToString(b[:])
		fd, err := openAt(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NOCTTY, perm, oneName)
		if err == unix.EEXIST && tries < 10 {
			continue
		}
		rel := path.Join(dir, name)
		if err != nil {
			return nil, "", pathErr("create", rel, err)
		}
		return os.NewFile(uintptr(fd), rel), rel, nil
	}
}

// Remove removes rel when it is not a directory (a symlink itself, not
// its target).
func (r *Root) Remove(rel string) error {
	pfd, name, err := r.parent("remove", rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return pathErr("remove", rel, unix.Unlinkat(pfd, name, 0))
}

// RemoveEmptyDir removes the directory rel if it is empty.
func (r *Root) RemoveEmptyDir(rel string) error {
	pfd, name, err := r.parent("rmdir", rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return pathErr("rmdir", rel, unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR))
}

// Resolve is where rel leads, its symlinks followed (while they stay
// inside), as a path relative to the workspace; rel must exist.
func (r *Root) Resolve(rel string) (string, error) {
	fd, err := openAt(r.fd, rel, unix.O_PATH, 0, beneath)
	if err != nil {
		return "", pathErr("resolve", rel, err)
	}
	defer unix.Close(fd)
	base, err1 := os.Readlink("/proc/self/fd/" + strconv.Itoa(r.fd))
	full, err2 := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err1 != nil || err2 != nil {
		return "", pathErr("resolve", rel, unix.EINVAL)
	}
	if full == base {
		return ".", nil
	}
	out, ok := strings.CutPrefix(full, base+"/")
	if !ok || base == "/" {
		return "", pathErr("resolve", rel, unix.EXDEV)
	}
	return out, nil
}
