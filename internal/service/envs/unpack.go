package envs

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/codecage/codecage/internal/bounded"
)

const (
	maxContextBytes   = 1 << 30 // one archive, unpacked
	maxContextEntries = 100000
)

// unpackUpload unpacks a tar (gzipped or not) into dest: regular files,
// directories and symbolic links only, no entry outside dest, within the
// caps. Nothing in it is executed or given set-id bits.
func unpackUpload(src, dest string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dest, 0o755); err != nil {
		return err
	}
	// os.Root keeps every entry, and every link it goes through, in dest.
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a tar archive: %v", err)
		}
		if n >= maxContextEntries {
			return fmt.Errorf("more than %d entries", maxContextEntries)
		}
		if err := unpackEntry(root, tr, h, &total); err != nil {
			return err
		}
	}
}

// maybeGunzip reads f through gzip when it starts with gzip's magic.
func maybeGunzip(f *os.File) (io.Reader, error) {
	var magic [2]byte
	_, err := io.ReadFull(f, magic[:])
	if _, serr := f.Seek(0, io.SeekStart); serr != nil {
		return nil, serr
	}
	if err == nil && magic == [2]byte{0x1f, 0x8b} {
		return gzip.NewReader(f)
	}
	return f, nil
}

// unpackEntry makes one archive entry h in root: a directory, a file
// (counted into total, bounded by maxContextBytes) or a symbolic link.
func unpackEntry(root *os.Root, tr *tar.Reader, h *tar.Header, total *int64) error {
	rel := strings.TrimPrefix(h.Name, "./")
	if len(rel) > 4096 || strings.HasPrefix(rel, "/") || slices.Contains(strings.Split(rel, "/"), "..") {
		return fmt.Errorf("entry %s is not a plain relative path", bounded.Quote(capText(h.Name, 200)))
	}
	name := strings.TrimPrefix(path.Clean("/"+rel), "/")
	if name == "" {
		return nil
	}
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, 0o755)
	case tar.TypeReg:
		*total += h.Size
		if *total > maxContextBytes {
			return fmt.Errorf("more than %d bytes unpacked", int64(maxContextBytes))
		}
		out, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(h.Mode).Perm()&^0o022|0o400)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, io.LimitReader(tr, h.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	case tar.TypeSymlink:
		if len(h.Linkname) > 4096 || strings.ContainsRune(h.Linkname, 0) {
			return fmt.Errorf("link %s is too long", bounded.Quote(capText(h.Name, 200)))
		}
		return root.Symlink(h.Linkname, name)
	}
	return fmt.Errorf("entry %s is neither a file, a directory nor a symbolic link", bounded.Quote(capText(h.Name, 200)))
}

func capText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
