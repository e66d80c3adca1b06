package service_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// newPortService is a service whose commands may run python3 (the
// default list has it).
func newPortService(t *testing.T) *service.Service {
	t.Helper()
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.MemoryLimit = 256 << 20
	return newServiceWith(t, cfg)
}

// serveInSession starts `python3 -m http.server port` as a background
// command of the session, as an E2B program does, and waits until
// OpenPort reaches it; it returns the connection's error if it never does.
func serveInSession(t *testing.T, svc *service.Service, id, owner string, port int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_, _ = svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: owner, Timeout: 2 * time.Minute,
			Command: fmt.Sprintf("echo page-of-%s > page.txt && exec python3 -m http.server %d", id, port)})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Errorf("the server command of session %s did not end 30 s after its cancellation", id)
		}
	})
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var c net.Conn
		if c, err = svc.OpenPort(context.Background(), service.PortRequest{SessionID: id, Owner: owner, Port: port}); err == nil {
			c.Close()
			return nil
		}
		if !errors.Is(err, service.ErrPortClosed) {
			return err
		}
	}
	return err
}

// get sends one HTTP request over a connection OpenPort made.
func get(t *testing.T, c net.Conn, path string) (int, string) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: sandbox\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the sandbox's answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A server a session's command listens with on its loopback is reached
// through OpenPort; a port nothing listens on is ErrPortClosed; a bad
// port is refused; a closed session is not found.
func TestOpenPortReachesASessionsServer(t *testing.T) {
	svc := newPortService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Servers: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := serveInSession(t, svc, info.ID, "alice", 8000); err != nil {
		t.Fatalf("the server in the sandbox was never reached: %v", err)
	}
	c, err := svc.OpenPort(ctx, service.PortRequest{SessionID: info.ID, Owner: "alice", Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := get(t, c, "/page.txt"); status != 200 || strings.TrimSpace(body) != "page-of-"+info.ID {
		t.Fatalf("GET /page.txt: %d %q", status, body)
	}
	if _, err := svc.OpenPort(ctx, service.PortRequest{SessionID: info.ID, Owner: "alice", Port: 8001}); !errors.Is(err, service.ErrPortClosed) {
		t.Errorf("a closed port: %v, want ErrPortClosed", err)
	}
	for _, p := range []int{0, -1, 65536} {
		if _, err := svc.OpenPort(ctx, service.PortRequest{SessionID: info.ID, Owner: "alice", Port: p}); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("port %d: %v, want ErrInvalidRequest", p, err)
		}
	}
	if _, err := svc.OpenPort(ctx, service.PortRequest{SessionID: info.ID, Owner: "mallory", Port: 8000}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Errorf("another owner: %v, want ErrSessionNotFound", err)
	}
	if err := svc.CloseSession(ctx, info.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.OpenPort(ctx, service.PortRequest{SessionID: info.ID, Owner: "alice", Port: 8000}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Errorf("a closed session: %v, want ErrSessionNotFound", err)
	}
}

// Containment, judged from the host: reaching a sandbox's server gives
// the sandbox no network (its namespace keeps lo only, seen in
// /proc/<pid>/net/dev of its processes, and is not the host's), and the
// relay reaches the sandbox's own loopback only: a port of the host's
// loopback, or one another session listens on, is not reached through it
// (the host listener accepts nothing). Under gVisor the relay is a
// program runsc execs inside the sandbox, in gVisor's network stack.
func TestOpenPortGivesNoWayOut(t *testing.T) {
	svc := newPortService(t)
	ctx := context.Background()
	a, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Servers: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Servers: true})
	if err != nil {
		t.Fatal(err)
	}
	aPort, bPort := 20000+rand.IntN(20000), 0
	for bPort == 0 || bPort == aPort {
		bPort = 20000 + rand.IntN(20000)
	}
	if err := serveInSession(t, svc, a.ID, "alice", aPort); err != nil {
		t.Fatalf("session a's server was never reached: %v", err)
	}
	if err := serveInSession(t, svc, b.ID, "alice", bPort); err != nil {
		t.Fatalf("session b's server was never reached: %v", err)
	}

	// The host's loopback: a listener there sees no connection.
	host := newHostRecorder(t, "tcp4", "127.0.0.1:0")
	hostPort := host.ln.Addr().(*net.TCPAddr).Port
	for _, sid := range []string{a.ID, b.ID} {
		c, err := svc.OpenPort(ctx, service.PortRequest{SessionID: sid, Owner: "alice", Port: hostPort})
		if err == nil {
			c.Close()
			t.Errorf("OpenPort(%d) of session %s connected: the host's port is reachable through the relay", hostPort, sid)
		}
	}
	// Another session's server: a's relay does not reach b's port.
	if c, err := svc.OpenPort(ctx, service.PortRequest{SessionID: a.ID, Owner: "alice", Port: bPort}); err == nil {
		c.Close()
		t.Errorf("session a's relay reached port %d, which only session b listens on", bPort)
	} else if !errors.Is(err, service.ErrPortClosed) {
		t.Errorf("session a, port %d (b's): %v, want ErrPortClosed", bPort, err)
	}
	host.expectNoHits(t)

	// The servers' network namespaces, from the host: not the host's, and
	// with no interface but lo.
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{aPort, bPort} {
		pids := serverPids(t, port)
		if onGVisor() {
			// gVisor's kernel runs the server, and its relay: neither is
			// a host process, and runsc's have no network either.
			if len(pids) != 0 {
				t.Errorf("host processes %v are the server on port %d: it left gVisor's kernel", pids, port)
			}
			continue
		}
		if len(pids) == 0 {
			t.Fatalf("no host process is the server on port %d", port)
		}
		for _, pid := range pids {
			ns, err := os.Readlink(filepath.Join("/proc", pid, "ns/net"))
			if err != nil {
				continue // ended meanwhile
			}
			if ns == self {
				t.Errorf("the server on port %d (pid %s) is in the host's network namespace", port, pid)
			}
			if ifaces := interfaces(t, pid); len(ifaces) != 1 || ifaces[0] != "lo" {
				t.Errorf("the server on port %d (pid %s) sees interfaces %q, want lo only", port, pid, ifaces)
			}
		}
	}
}

// serverPids are the host pids of `python3 -m http.server port`.
func serverPids(t *testing.T, port int) []string {
	t.Helper()
	want := []byte(fmt.Sprintf("http.server\x00%d", port))
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, want) {
			out = append(out, e.Name())
		}
	}
	return out
}

// interfaces are the network interfaces in pid's network namespace, read
// from the host (/proc/<pid>/net/dev).
func interfaces(t *testing.T, pid string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "net/dev"))
	if err != nil {
		t.Fatalf("net/dev of %s: %v", pid, err)
	}
	var out []string
	for i, line := range strings.Split(string(raw), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && i >= 2 {
			out = append(out, strings.TrimSpace(name))
		}
	}
	return out
}
