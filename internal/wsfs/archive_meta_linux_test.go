package wsfs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/wsfs"
)

var metaLimits = wsfs.MetaLimits{Keys: 4, Bytes: 64}

// A file's user.e2b.* attributes travel through Archive and Unpack as PAX
// records, within the limits and rules of a write's metadata; other
// attributes, bad keys and values, and what is past a bound stay behind.
func TestArchiveCarriesMetadata(t *testing.T) {
	src, dst := scratch(t), scratch(t)
	f := filepath.Join(src, "d", "f.txt")
	must(t, os.MkdirAll(filepath.Dir(f), 0o755))
	must(t, os.WriteFile(f, []byte("x"), 0o644))
	for k, v := range map[string]string{
		"user.e2b.owner":  "alice",
		"user.e2b.stage":  "raw",
		"user.other":      "not metadata",
		"user.e2b.a=b":    "a key a PAX record cannot hold",
		"user.e2b.binary": "\x00\xff",
		"user.e2b.zz":     strings.Repeat("v", 60), // past the bytes bound with the others
	} {
		must(t, unix.Setxattr(f, k, []byte(v), 0))
	}
	lim := roomy
	lim.Metadata = metaLimits
	var buf bytes.Buffer
	_, err := wsfs.Archive(context.Background(), src, &buf, lim)
	must(t, err)
	must(t, wsfs.Unpack(context.Background(), dst, bytes.NewReader(buf.Bytes()), owner, lim))
	got := xattrs(t, filepath.Join(dst, "d", "f.txt"))
	if fmt.Sprint(got) != "map[user.e2b.owner:alice user.e2b.stage:raw]" {
		t.Fatalf("restored attributes %v", got)
	}

	// Without metadata limits (a site-packages archive) none is carried.
	buf.Reset()
	_, err = wsfs.Archive(context.Background(), src, &buf, roomy)
	must(t, err)
	if bytes.Contains(buf.Bytes(), []byte("alice")) {
		t.Fatal("an archive without metadata limits holds metadata")
	}
}

// An archive made elsewhere (a snapshot store anyone may write to) gets
// the same bounds on unpacking: too many keys, too many bytes and bad
// keys are left out, never an error or a pile of attributes.
func TestUnpackBoundsHostileMetadata(t *testing.T) {
	recs := map[string]string{}
	for i := range 100 {
		recs[fmt.Sprintf("SCHILY.xattr.user.e2b.k%03d", i)] = "v"
	}
	recs["SCHILY.xattr.user.e2b.bad key"] = "v"
	recs["SCHILY.xattr.security.evil"] = "v"
	recs["SCHILY.xattr.trusted.evil"] = "v"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Size: 1, Mode: 0o644, PAXRecords: recs, Format: tar.FormatPAX}))
	_, err := tw.Write([]byte("x"))
	must(t, err)
	must(t, tw.Close())
	dst := scratch(t)
	lim := roomy
	lim.Metadata = metaLimits
	must(t, wsfs.Unpack(context.Background(), dst, bytes.NewReader(buf.Bytes()), owner, lim))
	got := xattrs(t, filepath.Join(dst, "f"))
	if len(got) != metaLimits.Keys {
		t.Fatalf("%d attributes restored, want %d: %v", len(got), metaLimits.Keys, got)
	}
	for k := range got {
		if !strings.HasPrefix(k, wsfs.MetadataPrefix+"k") {
			t.Fatalf("restored %q", k)
		}
	}
}

func xattrs(t *testing.T, path string) map[string]string {
	t.Helper()
	names := make([]byte, 64<<10)
	n, err := unix.Listxattr(path, names)
	must(t, err)
	out := map[string]string{}
	for _, name := range strings.Split(string(names[:n]), "\x00") {
		if name == "" {
			continue
		}
		val := make([]byte, 64<<10)
		m, err := unix.Getxattr(path, name, val)
		must(t, err)
		out[name] = string(val[:m])
	}
	return out
}
