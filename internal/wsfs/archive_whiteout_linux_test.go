package wsfs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/wsfs"
)

// An overlay's upper layer (a machine's root) goes through an archive
// with its whiteouts (character devices 0/0) and opaque directories, so
// that what root removed stays removed in a copy; any other device is
// still left out and refused, and without Whiteouts nothing changes.
func TestArchiveKeepsAnOverlaysWhiteouts(t *testing.T) {
	src := scratch(t)
	must(t, os.MkdirAll(filepath.Join(src, "usr/.upper/bin"), 0o755))
	must(t, unix.Mknod(filepath.Join(src, "usr/.upper/bin/yes"), unix.S_IFCHR, 0))
	must(t, unix.Mknod(filepath.Join(src, "usr/.upper/bin/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, os.MkdirAll(filepath.Join(src, "usr/.upper/share/doc"), 0o755))
	must(t, unix.Setxattr(filepath.Join(src, "usr/.upper/share/doc"), "user.overlay.opaque", []byte("y"), 0))
	must(t, os.WriteFile(filepath.Join(src, "usr/.upper/share/doc/mine"), []byte("x"), 0o644))

	lim := roomy
	lim.Whiteouts = true
	var buf bytes.Buffer
	rep, err := wsfs.Archive(context.Background(), src, &buf, lim)
	must(t, err)
	if !strings.Contains(strings.Join(rep.Skipped, " "), "null") || strings.Contains(strings.Join(rep.Skipped, " "), "yes") {
		t.Errorf("report: %s (want the device named, the whiteout kept)", strings.Join(rep.Skipped, " "))
	}
	dst := scratch(t)
	must(t, wsfs.Unpack(context.Background(), dst, bytes.NewReader(buf.Bytes()), owner, lim))
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dst, "usr/.upper/bin/yes"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 || int(st.Uid) != owner {
		t.Errorf("the whiteout: mode %o rdev %d uid %d", st.Mode, st.Rdev, st.Uid)
	}
	if _, err := os.Lstat(filepath.Join(dst, "usr/.upper/bin/null")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a real device went through: %v", err)
	}
	v := make([]byte, 8)
	if n, err := unix.Getxattr(filepath.Join(dst, "usr/.upper/share/doc"), "user.overlay.opaque", v); err != nil || string(v[:n]) != "y" {
		t.Errorf("the opaque directory: %q %v", v[:n], err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "usr/.upper/share/doc/mine")); err != nil || string(b) != "x" {
		t.Errorf("a file in it: %q %v", b, err)
	}

	// A workspace's archive: no whiteout, no opaque mark.
	buf.Reset()
	rep, err = wsfs.Archive(context.Background(), src, &buf, roomy)
	must(t, err)
	if !strings.Contains(strings.Join(rep.Skipped, " "), "yes") {
		t.Errorf("a workspace's report: %s (want the whiteout named as left out)", strings.Join(rep.Skipped, " "))
	}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		if h.Typeflag == tar.TypeChar || len(h.PAXRecords) > 0 {
			t.Errorf("a workspace's archive holds %q (type %c, %v)", h.Name, h.Typeflag, h.PAXRecords)
		}
	}

	// Whiteouts allow 0/0 alone.
	err = wsfs.Unpack(context.Background(), scratch(t), bytes.NewReader(hostile(t, &tar.Header{Typeflag: tar.TypeChar, Name: "mem", Devmajor: 1, Devminor: 1})), owner, lim)
	if !errors.Is(err, wsfs.ErrUnsafeEntry) {
		t.Errorf("a device 1/1 with Whiteouts: %v", err)
	}
}
