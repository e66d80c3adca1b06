package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// fetchCode is Python that GETs 127.0.0.1:port/path and gives the body,
// or the name of the error.
func fetchCode(port int, path string) string {
	return fmt.Sprintf(`import urllib.request
try:
    r = urllib.request.urlopen("http://127.0.0.1:%d%s", timeout=10).read().decode().strip()
except Exception as e:
    r = type(e).__name__
r`, port, path)
}

// fetchCommand is the same GET from a command of the session.
func fetchCommand(t *testing.T, svc *service.Service, id, owner string, port int, path string) string {
	t.Helper()
	code := strings.ReplaceAll(fetchCode(port, path), "\nr", "\nprint(r)")
	res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: id, Owner: owner,
		Argv: []string{"python3", "-c", code}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("command: %v", err)
	}
	return strings.TrimSpace(res.Stdout) + strings.TrimSpace(res.Stderr)
}

// fetchCell is the GET from the session's interpreter (runCode).
func fetchCell(t *testing.T, svc *service.Service, id, owner string, port int, path string) string {
	t.Helper()
	res, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: owner, Code: fetchCode(port, path)})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	var got string
	if err := json.Unmarshal(res.Result, &got); err != nil {
		t.Fatalf("result %s (%+v, stderr %q)", res.Result, res.Error, res.Stderr)
	}
	return got
}

// serveFromCode starts a server in a thread of the session's interpreter,
// answering "from-code" to any GET.
func serveFromCode(t *testing.T, svc *service.Service, id, owner string, port int) {
	t.Helper()
	res, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: owner, Code: fmt.Sprintf(`import http.server, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"from-code")
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", %d), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()`, port)})
	if err != nil || !res.Success {
		t.Fatalf("serving from the interpreter: %v %+v %q", err, res.Error, res.Stderr)
	}
}

// sessionNetns are the network namespaces of every host process running
// as the uid of the process pid (a session's sandboxes share one uid:
// its interpreter, its commands, their inits), by pid.
func sessionNetns(t *testing.T, pid string) map[string]string {
	t.Helper()
	uid := uidOf(pid)
	if uid == "" {
		t.Fatalf("no uid for pid %s", pid)
	}
	out := map[string]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if uidOf(e.Name()) != uid {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns/net")); err == nil {
			out[e.Name()] = ns
		}
	}
	return out
}

// randomPorts are two different ports no other test is likely to use.
func randomPorts() (int, int) {
	p := 20000 + rand.IntN(20000)
	return p, p + 7
}

func uidOf(pid string) string {
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(v)[0]
		}
	}
	return ""
}

// oneNetns is the one namespace of the processes, failing the test when
// they are in several, or in the host's.
func oneNetns(t *testing.T, what string, procs map[string]string) string {
	t.Helper()
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for pid, ns := range procs {
		seen[ns] = append(seen[ns], pid)
	}
	if len(seen) != 1 {
		t.Fatalf("%s: its processes are in %d network namespaces: %v", what, len(seen), seen)
	}
	for ns, pids := range seen {
		if ns == host {
			t.Fatalf("%s: processes %v are in the host's network namespace", what, pids)
		}
		for _, pid := range pids {
			if ifaces := interfaces(t, pid); len(ifaces) != 1 || ifaces[0] != "lo" {
				t.Errorf("%s: pid %s sees interfaces %q, want lo only", what, pid, ifaces)
			}
		}
		return ns
	}
	return ""
}

// One loopback per session, as in E2B's VM: a server a background
// command starts is reached from the interpreter and from another
// command; one the interpreter starts is reached from a command and
// through OpenPort. Judged from the host: every process of the session
// (interpreter, commands, their inits) is in one network namespace, with
// lo only, not the host's.
func TestSessionSharesOneLoopback(t *testing.T) {
	if onGVisor() {
		t.Skip("gVisor: the interpreter's loopback is runsc's own network stack (ports are refused, see TestOpenPortReachesASessionsServer)")
	}
	svc := newPortService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Servers: true})
	if err != nil {
		t.Fatal(err)
	}
	cmdPort, codePort := randomPorts()
	if err := serveInSession(t, svc, info.ID, "alice", cmdPort); err != nil {
		t.Fatalf("the command's server was never reached: %v", err)
	}
	page := "page-of-" + info.ID
	if got := fetchCell(t, svc, info.ID, "alice", cmdPort, "/page.txt"); got != page {
		t.Errorf("runCode fetching the command's server: %q, want %q", got, page)
	}
	if got := fetchCommand(t, svc, info.ID, "alice", cmdPort, "/page.txt"); got != page {
		t.Errorf("another command fetching the command's server: %q, want %q", got, page)
	}

	serveFromCode(t, svc, info.ID, "alice", codePort)
	if got := fetchCommand(t, svc, info.ID, "alice", codePort, "/"); got != "from-code" {
		t.Errorf("a command fetching the interpreter's server: %q", got)
	}
	c, err := svc.OpenPort(ctx, service.PortRequest{SessionID: info.ID, Owner: "alice", Port: codePort})
	if err != nil {
		t.Fatalf("OpenPort to the interpreter's server: %v", err)
	}
	if status, body := get(t, c, "/"); status != 200 || body != "from-code" {
		t.Errorf("OpenPort to the interpreter's server: %d %q", status, body)
	}

	pids := serverPids(t, cmdPort)
	if len(pids) == 0 {
		t.Fatal("no host process is the command's server")
	}
	procs := sessionNetns(t, pids[0])
	if len(procs) < 4 { // the interpreter and its init, the server and its init
		t.Fatalf("the session's processes: %v", procs)
	}
	oneNetns(t, "the session", procs)
}

// Sessions stay apart: a second session reaches none of the first's
// servers (from its interpreter, its commands or OpenPort), and the two
// are in different namespaces, neither the host's (judged from the
// host). After a restart the session keeps its namespace, and its
// command's server is reached from the new interpreter.
func TestSessionsHaveTheirOwnLoopback(t *testing.T) {
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
	port, _ := randomPorts()
	if err := serveInSession(t, svc, a.ID, "alice", port); err != nil {
		if onGVisor() && errors.Is(err, service.ErrUnavailable) {
			t.Logf("gVisor: %v", err)
		} else {
			t.Fatalf("session a's server was never reached: %v", err)
		}
	}
	if got := fetchCell(t, svc, b.ID, "alice", port, "/page.txt"); got != "URLError" {
		t.Errorf("session b's interpreter fetching a's server: %q, want URLError (refused)", got)
	}
	if got := fetchCommand(t, svc, b.ID, "alice", port, "/page.txt"); got != "URLError" {
		t.Errorf("session b's command fetching a's server: %q, want URLError (refused)", got)
	}
	if c, err := svc.OpenPort(ctx, service.PortRequest{SessionID: b.ID, Owner: "alice", Port: port}); err == nil {
		c.Close()
		t.Errorf("OpenPort of session b reached a's server on port %d", port)
	}
	if onGVisor() {
		return // the rest is about the native namespaces
	}

	// b's processes, found by a server of its own.
	bPort := port + 1
	if err := serveInSession(t, svc, b.ID, "alice", bPort); err != nil {
		t.Fatalf("session b's server was never reached: %v", err)
	}
	nsA := oneNetns(t, "session a", sessionNetns(t, serverPids(t, port)[0]))
	nsB := oneNetns(t, "session b", sessionNetns(t, serverPids(t, bPort)[0]))
	if nsA == nsB {
		t.Fatalf("sessions a and b share the network namespace %s", nsA)
	}

	if _, err := svc.RestartSession(ctx, a.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if got := fetchCell(t, svc, a.ID, "alice", port, "/page.txt"); got != "page-of-"+a.ID {
		t.Errorf("a's restarted interpreter fetching a's command's server: %q", got)
	}
	if got := oneNetns(t, "session a after a restart", sessionNetns(t, serverPids(t, port)[0])); got != nsA {
		t.Errorf("session a's namespace changed at the restart: %s, was %s", got, nsA)
	}
}

// A session with the network profile shares one namespace too, whose
// only way out is its proxy: its interpreter reaches an allowed host
// through the proxy and nothing directly, a command reaches nothing of
// the host directly, and a host listener sees no connection.
func TestNetworkSessionReachesOnlyItsProxy(t *testing.T) {
	srv, other, hits := egressServers(t)
	addr := strings.TrimPrefix(srv.URL, "http://")
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{addr}
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Profiles: []string{"network"}, Servers: true})
	if err != nil {
		t.Fatal(err)
	}
	host := newHostRecorder(t, "tcp4", "127.0.0.1:0")
	hostPort := host.ln.Addr().(*net.TCPAddr).Port
	res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Code: fmt.Sprintf(`import urllib.request, urllib.error, socket
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return e.code
def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=3)
        return "connected"
    except OSError as e:
        return e.errno
[get(%q), get(%q), direct("127.0.0.1", %d), direct("1.1.1.1", 443)]`, srv.URL+"/x", other.URL+"/", hostPort)})
	if err != nil || !res.Success {
		t.Fatalf("%v %+v %q", err, res.Error, res.Stderr)
	}
	var got []any
	if err := json.Unmarshal(res.Result, &got); err != nil || len(got) != 4 {
		t.Fatalf("result %s", res.Result)
	}
	if got[0] != "hello from the host" || got[1] != float64(403) || got[2] == "connected" || got[3] == "connected" {
		t.Errorf("interpreter: %v (want the allowed host through the proxy, 403 for another, no direct connection)", got)
	}
	cmd := fmt.Sprintf(`import socket
for a in [("127.0.0.1", %d), (%q, %s), ("1.1.1.1", 443)]:
    try:
        socket.create_connection(a, timeout=3)
        print("connected", a)
    except OSError as e:
        print("refused", e.errno)`, hostPort, strings.Split(addr, ":")[0], strings.Split(addr, ":")[1])
	cres, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "o", Argv: []string{"python3", "-c", cmd}, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cres.Stdout, "connected") || strings.Count(cres.Stdout, "refused") != 3 {
		t.Errorf("command: %q %q", cres.Stdout, cres.Stderr)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the allowed host saw %d requests, want 1 (through the proxy)", n)
	}
	host.expectNoHits(t)
	if !onGVisor() {
		port, _ := randomPorts()
		if err := serveInSession(t, svc, info.ID, "o", port); err != nil {
			t.Fatalf("the network session's server was never reached: %v", err)
		}
		oneNetns(t, "the network session", sessionNetns(t, serverPids(t, port)[0]))
	}
}
