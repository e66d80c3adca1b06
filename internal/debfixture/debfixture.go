// Package debfixture makes Debian packages and serves them as a flat apt
// repository on loopback, for tests of package managers in machines
// (PyPI and Debian's mirrors are out of reach where the tests run).
package debfixture

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Package builds dir/name.deb: an "all" package of version 1.0 whose one
// program, /usr/bin/name, prints "hello from name", depending on the
// packages named in depends (apt's syntax: "bash (>= 5)").
func Package(dir, name string, depends ...string) (string, error) {
	tree, err := os.MkdirTemp("", "debfixture-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	for _, d := range []string{"DEBIAN", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			return "", err
		}
	}
	control := "Package: " + name + "\nVersion: 1.0\nArchitecture: all\nMaintainer: codecage tests <tests@codecage.invalid>\nDescription: what the machine tests install\n"
	if len(depends) > 0 {
		control += "Depends: " + strings.Join(depends, ", ") + "\n"
	}
	if err := os.WriteFile(filepath.Join(tree, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tree, "usr/bin", name), []byte("#!/bin/sh\necho hello from "+name+"\n"), 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, name+".deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", tree, out).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb: %v: %s", err, b)
	}
	return out, nil
}

// Repo is a flat repository ("deb [trusted=yes] URL ./") of the .deb
// files of a directory, served on loopback.
type Repo struct {
	URL string
	srv *http.Server
	mu  sync.Mutex
	got map[string]int // requests by path
}

// ServeRepo indexes dir's .deb files (Packages and an unsigned Release)
// and serves dir.
func ServeRepo(dir string) (*Repo, error) {
	debs, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return nil, err
	}
	var packages strings.Builder
	for _, deb := range debs {
		stanza, err := stanzaOf(deb)
		if err != nil {
			return nil, err
		}
		packages.WriteString(stanza + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "Packages"), []byte(packages.String()), 0o644); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(packages.String()))
	release := fmt.Sprintf("Origin: codecage tests\nLabel: codecage tests\nDate: %s\nSHA256:\n %s %d Packages\n",
		time.Now().UTC().Format(time.RFC1123), hex.EncodeToString(sum[:]), packages.Len())
	if err := os.WriteFile(filepath.Join(dir, "Release"), []byte(release), 0o644); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Repo{URL: "http://" + ln.Addr().String() + "/", got: map[string]int{}}
	files := http.FileServer(http.Dir(dir))
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got[path.Clean(req.URL.Path)]++ // apt asks for /./Packages
		r.mu.Unlock()
		files.ServeHTTP(w, req)
	})}
	go r.srv.Serve(ln)
	return r, nil
}

// stanzaOf is deb's entry in Packages: its control fields, where it is,
// its size and its hash.
func stanzaOf(deb string) (string, error) {
	control, err := exec.Command("dpkg-deb", "--field", deb).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-deb --field %s: %w", deb, err)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%sFilename: ./%s\nSize: %d\nSHA256: %s\n", control, filepath.Base(deb), len(b), hex.EncodeToString(sum[:])), nil
}

// Requests is how many requests asked for path ("/Packages",
// "/name.deb"), whatever the answer was.
func (r *Repo) Requests(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[path]
}

// Close stops the server.
func (r *Repo) Close() error { return r.srv.Close() }
