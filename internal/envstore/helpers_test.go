package envstore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/codecage/codecage/internal/envstore"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func openStore(t testing.TB) *envstore.Store {
	t.Helper()
	s, err := envstore.Open(filepath.Join(t.TempDir(), "environments"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func stage(t testing.TB, s *envstore.Store) *envstore.Staging {
	t.Helper()
	st, err := s.Stage()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Abort)
	return st
}

// entries lists the names in the store's subdirectory sub.
func entries(t testing.TB, s *envstore.Store, sub string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(s.Dir(), sub))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// assertEmptyStore fails unless staging, roots, layers and envs hold nothing.
func assertEmptyStore(t testing.TB, s *envstore.Store) {
	t.Helper()
	for _, sub := range []string{"staging", "roots", "layers", "envs"} {
		if got := entries(t, s, sub); len(got) != 0 {
			t.Errorf("%s/ holds %v after a refused build, want nothing", sub, got)
		}
	}
}

// diskBytes is the bytes the files under dir take on disk (blocks).
func diskBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func writeFile(t testing.TB, p string, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// mustLayer(t)(envfixture.X()) fails the test when the fixture does.
func mustLayer(t testing.TB) func(v1.Layer, error) v1.Layer {
	return func(l v1.Layer, err error) v1.Layer {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}
