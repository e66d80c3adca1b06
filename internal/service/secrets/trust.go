package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// A sandbox's trust store: its egress proxy's authority's certificate
// (ca.pem), and the authorities of the sandbox's root followed by it
// (bundle.pem), in a directory of their own bound read-only into the
// sandbox (fleet.Work.Trust). The authority's key is never written.

// rootsFile is where Debian (and Ubuntu, Alpine) keep the system's
// roots; rootsFiles are where other distributions' images do.
const rootsFile = "etc/ssl/certs/ca-certificates.crt"

var rootsFiles = []string{rootsFile, "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/ca-bundle.pem", "etc/ssl/cert.pem"}

// maxRoots bounds the roots read from a root (Debian's are about 220 KB).
const maxRoots = 8 << 20

var hostRoots struct {
	once sync.Once
	pem  []byte
}

// rootsOf are the system authorities of root ("": the host's), from the
// first of rootsFiles it has, read without following links out of it;
// none when it has none (the bundle is then the authority alone).
func rootsOf(root string) []byte {
	read := func(dir string) []byte {
		r, err := os.OpenRoot(dir)
		if err != nil {
			return nil
		}
		defer r.Close()
		for _, name := range rootsFiles {
			f, err := r.Open(name)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(io.LimitReader(f, maxRoots))
			f.Close()
			if len(b) > 0 {
				return b
			}
		}
		return nil
	}
	if root != "" {
		return read(root)
	}
	hostRoots.once.Do(func() { hostRoots.pem = read("/") })
	return hostRoots.pem
}

// WriteTrust makes a trust store for one proxy under base: its directory
// (readable by every uid, written by none but root), to bind.
func WriteTrust(base, root string, caPEM []byte) (string, error) {
	if err := os.MkdirAll(base, 0o711); err != nil {
		return "", err
	}
	var b [8]byte
	rand.Read(b[:])
	dir := filepath.Join(base, hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	bundle := append(append([]byte(nil), rootsOf(root)...), '\n')
	bundle = append(bundle, caPEM...)
	err := errors.Join(
		os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o444),
		os.WriteFile(filepath.Join(dir, "bundle.pem"), bundle, 0o444),
	)
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("trust store: %w", err)
	}
	return dir, nil
}

// RemoveTrust removes a trust store WriteTrust made.
func RemoveTrust(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
