package envs

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An upload unpacks into its directory only: entries that climb out, are
// absolute, or go through a link out of it are refused, and nothing
// lands outside; devices and hard links are refused.
func TestUnpackUploadStaysInside(t *testing.T) {
	outside := t.TempDir()
	for name, entries := range map[string][]tar.Header{
		"dotdot":        {{Name: "../escaped", Typeflag: tar.TypeReg}},
		"absolute":      {{Name: "/escaped", Typeflag: tar.TypeReg}},
		"through link":  {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "l/escaped", Typeflag: tar.TypeReg}},
		"relative link": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../" + outside}, {Name: "l/escaped", Typeflag: tar.TypeReg}},
		"device":        {{Name: "dev", Typeflag: tar.TypeChar}},
		"hard link":     {{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}},
	} {
		dir := t.TempDir()
		src := filepath.Join(dir, "up.tar")
		f, _ := os.Create(src)
		tw := tar.NewWriter(f)
		for _, h := range entries {
			h.Mode = 0o644
			_ = tw.WriteHeader(&h)
		}
		_ = tw.Close()
		_ = f.Close()
		if err := unpackUpload(src, filepath.Join(dir, "out")); err == nil {
			t.Errorf("%s: unpacked", name)
		}
		if _, err := os.Lstat(filepath.Join(outside, "escaped")); err == nil {
			t.Fatalf("%s: a file landed outside", name)
		}
	}
	// A plain archive unpacks, set-id and group/other write bits dropped.
	dir := t.TempDir()
	src := filepath.Join(dir, "up.tar")
	f, _ := os.Create(src)
	tw := tar.NewWriter(f)
	_ = tw.WriteHeader(&tar.Header{Name: "./a/b.sh", Typeflag: tar.TypeReg, Mode: 0o6777, Size: 2})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.WriteHeader(&tar.Header{Name: "a/link", Typeflag: tar.TypeSymlink, Linkname: "b.sh"})
	_ = tw.Close()
	_ = f.Close()
	if err := unpackUpload(src, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "out/a/b.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Fatalf("b.sh: %v %v", fi.Mode(), err)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "out/a/link")); !strings.HasSuffix(l, "b.sh") {
		t.Fatalf("link %q", l)
	}
}

// Copy steps of one stage that reuse an upload (the same files hash: the
// same source and destination, copied again after a runCmd) share its
// directory in the build context, unpacked once. Was: the second unpack
// failed the build with "mkdir .../context-N/<hash>: file exists".
func TestBuildContextTakesAReusedUploadOnce(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "data/hello.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	_, _ = tw.Write([]byte("hello"))
	_ = tw.Close()
	u := &uploads{base: t.TempDir()}
	a, b := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	for _, h := range []string{a, b} {
		if err := u.put("tpl", h, bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := u.context("tpl", []string{a, b, a, a})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, h := range []string{a, b} {
		if got, err := os.ReadFile(filepath.Join(dir, h, "data/hello.txt")); err != nil || string(got) != "hello" {
			t.Errorf("%s: %q %v", h, got, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the context holds %d entries, want the 2 uploads", len(entries))
	}
}
