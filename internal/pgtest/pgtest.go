// Package pgtest starts a real, throwaway PostgreSQL server for tests:
// Debian's postgresql package, run as the postgres user on a temporary
// directory and a loopback port, stopped when the test ends. Tests that
// need one fail (never skip) when PostgreSQL is not installed: the
// README's test command installs it.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
)

// Server is a running PostgreSQL.
type Server struct {
	t    testing.TB
	bin  string // the directory of initdb and pg_ctl
	dir  string // owned by the postgres user
	port int
	cred *syscall.Credential
}

// Start initialises a database cluster in a temporary directory and starts
// a server on a free loopback port. It is stopped by t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Fatalf("pgtest: %v (install Debian's postgresql package: apt-get install postgresql)", err)
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("pgtest: no postgres user (install Debian's postgresql package): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// initdb refuses to run as root; the directory must be the server's.
	dir, err := os.MkdirTemp("", "codecage-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, dir: dir, port: freePort(t), cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	t.Cleanup(func() {
		s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
		os.RemoveAll(dir)
	})
	if out, err := s.run("initdb", "-D", s.data(), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	s.Start()
	return s
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// DSN is the URL of the server's postgres database.
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start starts the server (again, after Stop) on the same port.
func (s *Server) Start() {
	s.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", s.port, s.dir)
	if out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// Stop stops the server at once, dropping its connections, as a crash or
// a lost network would.
func (s *Server) Stop() {
	s.t.Helper()
	if out, err := s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop"); err != nil {
		s.t.Fatalf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
}

func (s *Server) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd.CombinedOutput()
}

// binDir finds the newest installed PostgreSQL's programs.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(dirs) == 0 {
		return "", fmt.Errorf("no PostgreSQL under /usr/lib/postgresql")
	}
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[j]))))
		return vi > vj
	})
	return filepath.Dir(dirs[0]), nil
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// PostgreSQL binds it a moment later; another process taking it in
	// between is unlikely on a test machine.
	return l.Addr().(*net.TCPAddr).Port
}
