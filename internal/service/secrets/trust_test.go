package secrets

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteTrust(t *testing.T) {
	base := t.TempDir()
	ca := []byte("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n")
	dir, err := WriteTrust(base, "", ca)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	bundle, _ := os.ReadFile(filepath.Join(dir, "bundle.pem"))
	host, _ := os.ReadFile("/" + rootsFile)
	if !bytes.Equal(got, ca) || !bytes.HasSuffix(bundle, ca) || !bytes.HasPrefix(bundle, host) {
		t.Errorf("ca.pem %d bytes, bundle.pem %d bytes (the host's roots %d)", len(got), len(bundle), len(host))
	}
	for _, f := range []string{"ca.pem", "bundle.pem"} {
		if st, _ := os.Stat(filepath.Join(dir, f)); st.Mode().Perm() != 0o444 {
			t.Errorf("%s: mode %v", f, st.Mode())
		}
	}
	// An environment's root: its own roots, and a link out of it is not
	// followed to the host's.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755)
	os.Symlink("/"+rootsFile, filepath.Join(root, rootsFile))
	dir2, err := WriteTrust(base, root, ca)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir2, "bundle.pem")); strings.TrimSpace(string(b)) != strings.TrimSpace(string(ca)) {
		t.Errorf("through a link out of the root: %d bytes, want the authority alone", len(b))
	}
	// Another distribution's place for them.
	rhel := t.TempDir()
	os.MkdirAll(filepath.Join(rhel, "etc/pki/tls/certs"), 0o755)
	os.WriteFile(filepath.Join(rhel, "etc/pki/tls/certs/ca-bundle.crt"), []byte("RHEL ROOTS\n"), 0o644)
	dir3, err := WriteTrust(base, rhel, ca)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir3, "bundle.pem")); !bytes.HasPrefix(b, []byte("RHEL ROOTS\n")) {
		t.Errorf("an image keeping its roots in /etc/pki: %q", b)
	}
	if err := RemoveTrust(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Error("RemoveTrust left the directory")
	}
}

// BenchmarkWriteTrust is what a sandbox with the network pays at its
// start for its trust store (the host's roots, about 220 KB, and the
// authority's certificate).
func BenchmarkWriteTrust(b *testing.B) {
	base := b.TempDir()
	ca := []byte("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n")
	for b.Loop() {
		dir, err := WriteTrust(base, "", ca)
		if err != nil {
			b.Fatal(err)
		}
		RemoveTrust(dir)
	}
}
