package wsfs

import (
	"bytes"
	"strings"

	"golang.org/x/sys/unix"
)

// openMeta opens rel (not a symlink: the kernel keeps no user attributes
// on those) for its attributes: O_NONBLOCK so that a FIFO cannot hang us.
func (r *Root) openMeta(rel string) (int, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY
	return openAt(r.fd, rel, flags, 0, beneath)
}

// Metadata reads rel's user.e2b.* attributes (the prefix cut), within lim;
// nil when it has none or is not a regular file or directory.
func (r *Root) Metadata(rel string, lim MetaLimits) (map[string]string, error) {
	fd, err := r.openMeta(rel)
	if err != nil {
		if isErrno(err, unix.ELOOP, unix.ENXIO, unix.EACCES, unix.EPERM) {
			return nil, nil
		}
		return nil, pathErr("getxattr", rel, err)
	}
	defer unix.Close(fd)
	return readMetadata(fd, lim), nil
}

func readMetadata(fd int, lim MetaLimits) map[string]string {
	names := make([]byte, 64<<10) // XATTR_LIST_MAX
	n, err := unix.Flistxattr(fd, names)
	if err != nil || n <= 0 {
		return nil
	}
	var out map[string]string
	used := 0
	val := make([]byte, 64<<10) // XATTR_SIZE_MAX
	for _, name := range bytes.Split(names[:n], []byte{0}) {
		key, ok := strings.CutPrefix(string(name), MetadataPrefix)
		if !ok || key == "" {
			continue
		}
		if len(out) >= lim.Keys {
			break
		}
		m, err := unix.Fgetxattr(fd, string(name), val)
		if err != nil || used+len(key)+m > lim.Bytes {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val[:m])
		used += len(key) + m
	}
	return out
}

// SetMetadataFD replaces the user.e2b.* attributes of the open file f
// with md: a write replaces a file's whole metadata, as envd's does.
func SetMetadataFD(fd int, md map[string]string) error {
	names := make([]byte, 64<<10)
	if n, err := unix.Flistxattr(fd, names); err == nil {
		for _, name := range bytes.Split(names[:n], []byte{0}) {
			if strings.HasPrefix(string(name), MetadataPrefix) {
				if err := unix.Fremovexattr(fd, string(name)); err != nil && err != unix.ENODATA {
					return err
				}
			}
		}
	}
	for k, v := range md {
		if err := unix.Fsetxattr(fd, MetadataPrefix+k, []byte(v), 0); err != nil {
			return err
		}
	}
	return nil
}

// SetMetadata replaces rel's user.e2b.* attributes with md.
func (r *Root) SetMetadata(rel string, md map[string]string) error {
	fd, err := r.openMeta(rel)
	if err != nil {
		return pathErr("setxattr", rel, err)
	}
	defer unix.Close(fd)
	return pathErr("setxattr", rel, SetMetadataFD(fd, md))
}
