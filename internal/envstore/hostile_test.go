package envstore_test

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// refuse imports ref, wants ErrBadImage with every fragment in its
// message, aborts as the service does, and wants the store empty.
func refuse(t *testing.T, s *envstore.Store, ref string, fragments ...string) {
	t.Helper()
	st, err := s.Stage()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.ImportImage(context.Background(), st, ref, nil)
	st.Abort()
	if !errors.Is(err, envstore.ErrBadImage) {
		t.Fatalf("import = %v, want ErrBadImage", err)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not say %q", err, f)
		}
	}
	assertEmptyStore(t, s)
}

func TestHostileLayersRefused(t *testing.T) {
	outside := t.TempDir() // what a symlink points a write at
	benign := []envfixture.TarEntry{{Name: "etc/ok", Body: []byte("ok")}}
	cases := []struct {
		name      string
		layer     func(t *testing.T) v1.Layer
		fragments []string
	}{
		{"dotdot", entriesLayer(envfixture.EscapeDotDot()), []string{"../../etc/envfixture-escape", "escapes the root"}},
		{"absolute", entriesLayer(envfixture.EscapeAbsolute()), []string{"/etc/envfixture-escape", "absolute path"}},
		{"symlink-then-write", entriesLayer(envfixture.SymlinkThenWrite(outside)), []string{"evil/planted", "symlink"}},
		{"hardlink-outside", entriesLayer(envfixture.HardLinkOutside()), []string{`"passwd"`, "outside the root"}},
		{"hardlink-absolute", entriesLayer(envfixture.HardLinkAbsolute()), []string{"/etc/passwd", "outside the root"}},
		{"whiteout-dotdot", entriesLayer(envfixture.WhiteoutDotDot()), []string{"usr/.wh...", `whiteout of ".."`}},
		{"corrupt-gzip", func(t *testing.T) v1.Layer { return mustLayer(t)(envfixture.CorruptGzipLayer()) }, []string{"layer 2/2", "corrupt", "flate"}},
		{"truncated-tar", func(t *testing.T) v1.Layer { return mustLayer(t)(envfixture.TruncatedTarLayer()) }, []string{"layer 2/2", "truncated"}},
		{"digest-mismatch", func(t *testing.T) v1.Layer { return mustLayer(t)(envfixture.DigestMismatchLayer()) }, []string{"layer 2/2", "digest mismatch"}},
		{"diffid-mismatch", func(t *testing.T) v1.Layer { return mustLayer(t)(envfixture.DiffIDMismatchLayer()) }, []string{"layer 2/2", "diff ID mismatch"}},
	}
	for _, c := range cases {
		for _, f := range formats {
			if c.name == "digest-mismatch" && f.name == "docker-archive" {
				continue // a docker archive names layers by file, not digest: the diff ID case covers it
			}
			t.Run(c.name+"/"+f.name, func(t *testing.T) {
				ref := writeImage(t, f, mustLayer(t)(envfixture.Layer(benign)), c.layer(t))
				refuse(t, openStore(t), ref, c.fragments...)
				if _, err := os.Lstat(filepath.Join(outside, "planted")); err == nil {
					t.Fatalf("a file was written outside the root, through a symlink")
				}
			})
		}
	}
}

func entriesLayer(es []envfixture.TarEntry) func(t *testing.T) v1.Layer {
	return func(t *testing.T) v1.Layer { return mustLayer(t)(envfixture.Layer(es)) }
}

// A symlink from a lower layer is no way out either.
func TestSymlinkFromLowerLayerRefused(t *testing.T) {
	outside := t.TempDir()
	ref := writeImage(t, formats[1],
		mustLayer(t)(envfixture.Layer([]envfixture.TarEntry{{Name: "lib", Type: tar.TypeSymlink, Linkname: outside}})),
		mustLayer(t)(envfixture.Layer([]envfixture.TarEntry{{Name: "lib/x", Body: []byte("x")}})))
	refuse(t, openStore(t), ref, "lib/x", "symlink")
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside the root: %v", ents)
	}
}

// The 10 GiB entry is refused at its header: nothing near the cap is
// written, and the body is never read.
func TestHugeLayerRefusedFast(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			ref := writeImage(t, f, mustLayer(t)(envfixture.HugeLayer()))
			s := openStore(t)
			st := stage(t, s)
			start := time.Now()
			_, err := s.ImportImage(context.Background(), st, ref, nil)
			t.Logf("refused in %v", time.Since(start))
			if !errors.Is(err, envstore.ErrBadImage) || !strings.Contains(err.Error(), "huge.bin") || !strings.Contains(err.Error(), "cap") {
				t.Fatalf("import = %v, want ErrBadImage naming huge.bin and the cap", err)
			}
			if n := diskBytes(t, filepath.Join(s.Dir(), "staging")); n > s.Limits.MaxBytes {
				t.Fatalf("%d bytes on disk, over the %d-byte cap", n, s.Limits.MaxBytes)
			}
			st.Abort()
			assertEmptyStore(t, s)
		})
	}
}

// The cap counts all entries: files that each fit but together pass it
// are refused when the cap is passed, with no more than the cap on disk.
func TestByteCapAcrossEntries(t *testing.T) {
	body := make([]byte, 400<<10)
	ref := writeImage(t, formats[0], mustLayer(t)(envfixture.Layer([]envfixture.TarEntry{
		{Name: "a", Body: body}, {Name: "b", Body: body}, {Name: "c", Body: body},
	})))
	s := openStore(t)
	s.Limits.MaxBytes = 1 << 20
	st := stage(t, s)
	_, err := s.ImportImage(context.Background(), st, ref, nil)
	if !errors.Is(err, envstore.ErrBadImage) || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("import = %v, want ErrBadImage naming entry c", err)
	}
	if n := diskBytes(t, st.Root()); n > s.Limits.MaxBytes {
		t.Fatalf("%d bytes on disk, over the cap %d", n, s.Limits.MaxBytes)
	}
	st.Abort()
	assertEmptyStore(t, s)
}

func TestEntryAndLayerCaps(t *testing.T) {
	s := openStore(t)
	s.Limits.MaxEntries = 2
	three := []envfixture.TarEntry{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	refuse(t, s, writeImage(t, formats[0], mustLayer(t)(envfixture.Layer(three))), "over 2 entries")
	s.Limits = envstore.DefaultLimits
	s.Limits.MaxPathDepth = 3
	refuse(t, s, writeImage(t, formats[0], mustLayer(t)(envfixture.Layer([]envfixture.TarEntry{{Name: "a/b/c/d"}}))), "a/b/c/d", "deeper than 3")
	s.Limits = envstore.DefaultLimits
	s.Limits.MaxLayers = 1
	l := mustLayer(t)(envfixture.Layer([]envfixture.TarEntry{{Name: "a"}}))
	refuse(t, s, writeImage(t, formats[1], l, l), "2 layers (cap 1)")
}

func TestUnknownRefs(t *testing.T) {
	s := openStore(t)
	refuse(t, s, "./no-such-image.tar", "no image file")
	junk := filepath.Join(t.TempDir(), "junk.tar")
	os.WriteFile(junk, []byte("not a tar at all, not even close"), 0o644)
	refuse(t, s, junk, "junk.tar")

	// No registry is reachable here: a clear error, quickly, nothing left.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := stage(t, s)
	_, err := s.ImportImage(ctx, st, "registry.invalid/codecage/none:1", nil)
	st.Abort()
	if err == nil || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("import of an unreachable reference = %v", err)
	}
	assertEmptyStore(t, s)
}
