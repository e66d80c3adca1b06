package jail

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openWithin runs open and fails the test if it has not returned within
// a bound (an open of a FIFO for reading waits for a writer for ever).
func openWithin(t *testing.T, what string, open func() (*os.File, error)) (*os.File, error) {
	t.Helper()
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := open()
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the open did not return within 10 s", what)
		return nil, nil
	}
}

// The resolver's opens of a root's files (and of the host's) return at
// once and yield regular files only: a FIFO, a link to one, a device
// node, a socket and a directory are refused, naming what they are; a
// link to a regular file is followed within the root, and one pointing
// out of it finds nothing of the host's.
func TestRootTreeOpensOnlyRegularFiles(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "lib/dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "lib/regular"), []byte("data"), 0o644))
	must(unix.Mkfifo(filepath.Join(root, "lib/fifo"), 0o644))
	must(unix.Mknod(filepath.Join(root, "lib/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mknod(filepath.Join(root, "lib/block"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))))
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(err)
	defer unix.Close(sock)
	must(unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(root, "lib/sock")}))
	must(os.Symlink("fifo", filepath.Join(root, "lib/to-fifo")))
	must(os.Symlink("/lib/regular", filepath.Join(root, "lib/to-regular")))
	must(os.Symlink("/etc/passwd", filepath.Join(root, "lib/to-host")))

	rt, err := openRootTree(root)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	refused := map[string]string{
		"/lib/fifo":    "a named pipe (FIFO), not a regular file",
		"/lib/to-fifo": "a named pipe (FIFO), not a regular file",
		"/lib/null":    "a character device, not a regular file",
		"/lib/block":   "a block device, not a regular file",
		"/lib/sock":    "", // a socket does not open at all (ENXIO)
		"/lib/dir":     "a directory, not a regular file",
		"/lib/to-host": "", // /etc/passwd of the root: there is none
	}
	for p, want := range refused {
		f, err := openWithin(t, p, func() (*os.File, error) { return rt.Open(p) })
		if err == nil {
			f.Close()
			t.Errorf("root %s opened", p)
			continue
		}
		if want != "" && (!errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), want)) {
			t.Errorf("root %s: %v, want %q", p, err, want)
		}
	}
	f, err := openWithin(t, "/lib/to-regular", func() (*os.File, error) { return rt.Open("/lib/to-regular") })
	if err != nil {
		t.Fatalf("a link to a regular file of the root: %v", err)
	}
	b := make([]byte, 8)
	n, _ := f.Read(b)
	f.Close()
	if string(b[:n]) != "data" {
		t.Fatalf("a link to a regular file of the root read %q", b[:n])
	}

	// The host's tree: the same refusals (the resolver reads the host's
	// system directories the same way).
	for _, p := range []string{"/lib/fifo", "/lib/to-fifo", "/lib/null", "/lib/dir"} {
		f, err := openWithin(t, "host "+p, func() (*os.File, error) { return hostTree{}.Open(root + p) })
		if err == nil {
			f.Close()
			t.Errorf("host %s opened", p)
		} else if !errors.Is(err, ErrNotRegular) {
			t.Errorf("host %s: %v, want ErrNotRegular", p, err)
		}
	}
}

// A root whose library of a data tree's extension and one loader
// configuration file are FIFOs resolves within a bound: both are left
// out, said in Skipped; a program whose own library is a FIFO is refused,
// naming it.
func TestRootResolveProgramsSkipsFIFOs(t *testing.T) {
	root := minimalRoot(t)
	libs, _ := filepath.Glob(filepath.Join(root, "usr/lib/*/libsqlite3.so.0"))
	if len(libs) != 1 {
		t.Fatalf("the host's Python has no sqlite3 extension with its own library (Debian's has): %v", libs)
	}
	lib := strings.TrimPrefix(libs[0], root)
	stdlib, _ := filepath.Glob(filepath.Join(root, "usr/lib/python3.*"))
	if len(stdlib) != 1 {
		t.Fatalf("the fixture's standard library: %v", stdlib)
	}
	for _, p := range []string{lib, "/etc/ld.so.conf.d/fifo.conf"} {
		os.Remove(filepath.Join(root, p))
		if err := unix.Mkfifo(filepath.Join(root, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever happens, no goroutine of the test stays blocked on them.
	defer func() {
		for _, p := range []string{lib, "/etc/ld.so.conf.d/fifo.conf"} {
			if fd, err := unix.Open(filepath.Join(root, p), unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
	}()
	type result struct {
		p   *Programs
		err error
	}
	resolve := func(names, data []string) result {
		t.Helper()
		done := make(chan result, 1)
		go func() {
			p, err := ResolveProgramsIn(root, names, data)
			done <- result{p, err}
		}()
		select {
		case r := <-done:
			return r
		case <-time.After(30 * time.Second):
			t.Fatal("resolving in a root with FIFOs did not return within 30 s")
			return result{}
		}
	}
	r := resolve([]string{"sh", "python3"}, []string{strings.TrimPrefix(stdlib[0], root)})
	if r.err != nil {
		t.Fatalf("resolve: %v", r.err)
	}
	skipped := strings.Join(r.p.Skipped, "\n")
	if !strings.Contains(skipped, "/etc/ld.so.conf.d/fifo.conf: a named pipe (FIFO)") || !strings.Contains(skipped, lib+" is a named pipe (FIFO)") {
		t.Fatalf("Skipped does not name both FIFOs: %q", r.p.Skipped)
	}
	if slices.Contains(r.p.Files, lib) || slices.Contains(r.p.Exec, lib) {
		t.Fatalf("the FIFO is among the jail's files: %v", r.p.Files)
	}
	if _, ok := r.p.Names["python3"]; !ok {
		t.Fatalf("python3 was not resolved: %+v", r.p)
	}

	// A program needing the FIFO: refused, named.
	prog := filepath.Join(root, "usr/bin/sqlitetool")
	src, _ := filepath.Glob(filepath.Join(stdlib[0], "lib-dynload/_sqlite3*.so"))
	if len(src) != 1 {
		t.Fatalf("the sqlite3 extension: %v", src)
	}
	b, err := os.ReadFile(src[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	r = resolve([]string{"sqlitetool"}, nil)
	if r.err == nil || !strings.Contains(r.err.Error(), lib+" is a named pipe (FIFO), not a regular file") {
		t.Fatalf("a program needing the FIFO: %v", r.err)
	}
}
