package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/leftovers"
)

// drainServer is serve with the E2B surface, its state directory the
// test's, no warm pools (so that what the host holds is the test's work).
func drainServer(t *testing.T, state string, env ...string) (*server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e2bAddr := l.Addr().String()
	l.Close()
	s := startServe(t, append([]string{"SANDBOX_E2B_LISTEN=" + e2bAddr, "SANDBOX_STATE_DIR=" + state,
		"SANDBOX_AUDIT_DB=" + filepath.Join(t.TempDir(), "audit.db"), "SANDBOX_POOL_SIZE=0", "SANDBOX_DATA_SCIENCE_POOL_SIZE=0",
		"SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0", "SANDBOX_RATE_LIMIT=0", "SANDBOX_KEY_CONCURRENCY=32"}, env...)...)
	s.state = state
	return s, "http://" + e2bAddr
}

// e2bCreate makes an E2B sandbox and returns the headers that reach it
// (without the port header).
func e2bCreate(t *testing.T, e2bURL string) http.Header {
	t.Helper()
	created := createE2BSandbox(t, e2bURL, "e2b_anyone", 300)
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", created["sandboxID"].(string))
	if tok, ok := created["envdAccessToken"].(string); ok {
		h.Set("X-Access-Token", tok)
	}
	return h
}

// slowUpload sends a request declaring a body of size bytes and feeds it
// 100 bytes every half second, as a client on a bad link would, until the
// server answers or cuts the connection. It returns once the headers and
// the first bytes are sent; done receives what ended it.
func slowUpload(t *testing.T, addr, head string, size int, first string) (done <-chan string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "%s\r\nContent-Length: %d\r\n\r\n%s", head, size, first); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	answered := make(chan string, 1)
	go func() {
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			answered <- "connection ended: " + err.Error()
			return
		}
		answered <- "answered " + strings.TrimSpace(line)
	}()
	go func() {
		sent := len(first)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case a := <-answered:
				out <- a
				return
			case <-tick.C:
			}
			n := min(100, size-sent)
			if n <= 0 {
				continue
			}
			if _, err := c.Write([]byte(strings.Repeat("a", n))); err != nil {
				out <- "write failed: " + err.Error() + "; " + <-answered
				return
			}
			sent += n
		}
	}()
	return out
}

// hostMountsUnder lists the mount points of the host (this test's mount
// namespace, which serve shares) under dir.
func hostMountsUnder(t *testing.T, dir string) []string {
	var out []string
	for mp := range mountsUnder(t, dir) {
		out = append(out, mp)
	}
	return out
}

// waitEmpty polls list until it is empty or the deadline passes, and
// returns what it last saw.
func waitEmpty(d time.Duration, list func() []string) []string {
	deadline := time.Now().Add(d)
	for {
		l := list()
		if len(l) == 0 || time.Now().After(deadline) {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeSIGTERMEndsWithinGraceWhateverClientsDo: SIGTERM while two
// uploads trickle in (REST and E2B, each declaring 400 kB and sending 100
// bytes every half second), a download's client has stopped reading, a
// session command sleeps 30 s and an E2B runCode sleeps 30 s: serve exits
// within its grace and a bound, tells the cut uploads it is stopping, and
// leaves nothing on the host (no sandbox process, no cgroup of its, no
// mount under its state directory).
func TestServeSIGTERMEndsWithinGraceWhateverClientsDo(t *testing.T) {
	state := t.TempDir()
	s, e2bURL := drainServer(t, state, "SANDBOX_SHUTDOWN_GRACE=2")
	pid := s.cmd.Process.Pid
	restAddr := strings.TrimPrefix(s.url, "http://")
	e2bAddr := strings.TrimPrefix(e2bURL, "http://")

	code, info := call(t, "POST", s.url+"/sessions", "", map[string]any{})
	id, _ := info["session_id"].(string)
	if code != 201 || id == "" {
		t.Fatalf("create session: %d %v", code, info)
	}
	h := e2bCreate(t, e2bURL)
	// A download whose client stops reading holds its request too; and
	// the session's state takes a minute to save, which parking must not
	// wait for.
	if code, res := call(t, "POST", s.url+"/sessions/"+id+"/execute", "", map[string]any{"code": "open('big', 'wb').write(b'x' * (24 << 20))\nclass Slow:\n    def __reduce__(self):\n        import time\n        time.sleep(60)\n        return (int, ())\nslow = Slow()"}); code != 200 || res["success"] != true {
		t.Fatalf("write the file to download: %d %v", code, res)
	}
	stalled, err := net.Dial("tcp", restAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET /sessions/%s/files/raw?path=big HTTP/1.1\r\nHost: x\r\n\r\n", id)
	if line, err := bufio.NewReader(stalled).ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("stalled download: %q %v", line, err)
	}

	const size = 400_000
	restUp := slowUpload(t, restAddr, "PUT /sessions/"+id+"/files/content HTTP/1.1\r\nHost: x\r\nContent-Type: application/json", size, `{"path": "slow.txt", "content": "`)
	var e2bHead strings.Builder
	fmt.Fprintf(&e2bHead, "POST /files?path=/home/user/slow.bin HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nE2b-Sandbox-Port: 49983")
	for k, v := range h {
		fmt.Fprintf(&e2bHead, "\r\n%s: %s", k, v[0])
	}
	e2bUp := slowUpload(t, e2bAddr, e2bHead.String(), size, "")

	// A session command: sleep 30, seen running from the host.
	command := make(chan string, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"command": "sleep 30", "session_id": id, "timeout": 120})
		resp, err := http.Post(s.url+"/commands", "application/json", strings.NewReader(string(b)))
		if err != nil {
			command <- err.Error()
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		command <- fmt.Sprintf("%d %s", resp.StatusCode, data)
	}()
	// An E2B runCode that sleeps 30 s, seen started by its first line.
	runCode := make(chan string, 1)
	started := make(chan struct{})
	go func() {
		req, _ := http.NewRequest("POST", e2bURL+"/execute", strings.NewReader(`{"code": "import time\nprint('started', flush=True)\ntime.sleep(30)"}`))
		req.Header = h.Clone()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("E2b-Sandbox-Port", "49999")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			close(started)
			runCode <- err.Error()
			return
		}
		defer resp.Body.Close()
		var lines []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "started") && len(lines) > 0 {
				select {
				case <-started:
				default:
					close(started)
				}
			}
		}
		select {
		case <-started:
		default:
			close(started)
		}
		runCode <- fmt.Sprintf("%d %v", resp.StatusCode, lines)
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the runCode never started")
	}
	if len(fleet.UIDRangesLeasedBy(pid)) == 0 {
		t.Fatalf("no uid lease names the server (pid %d): the checks below would see nothing", pid)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !sleeping(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the session command never ran sleep; stderr:\n%s", s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The grace (2 s), the answers' 5 s (the stalled download is cut then),
	// parking's bound (2 s), and teardown.
	const bound = 15 * time.Second
	select {
	case err := <-s.exited:
		s.exited <- err // for the cleanup
		t.Logf("serve exited %v after SIGTERM (%v)", time.Since(start).Round(10*time.Millisecond), err)
	case <-time.After(bound):
		// Its goroutines say where it waits.
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case err := <-s.exited:
			s.exited <- err
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("serve still running %v after SIGTERM with grace 2 s; stderr:\n%s", bound, s.stderr)
	}
	for name, ch := range map[string]<-chan string{"REST upload": restUp, "E2B upload": e2bUp, "session command": command, "runCode": runCode} {
		select {
		case r := <-ch:
			t.Logf("%s: %.300s", name, r)
			// A cut upload is told the server is stopping (503), not
			// that its request was bad.
			if strings.Contains(name, "upload") && !strings.HasPrefix(r, "answered HTTP/1.1 503") {
				t.Errorf("%s: %s, want a 503 answer", name, r)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: its client never saw an end", name)
		}
	}
	if procs := waitEmpty(10*time.Second, func() []string { return leftovers.SandboxProcessesOf(pid) }); len(procs) > 0 {
		t.Errorf("sandbox processes left: %v", procs)
	}
	if cgs := waitEmpty(10*time.Second, func() []string { return leftovers.Cgroups(pid) }); len(cgs) > 0 {
		t.Errorf("cgroups left: %v", cgs)
	}
	if mps := hostMountsUnder(t, state); len(mps) > 0 {
		t.Errorf("mounts left under the state directory: %v", mps)
	}
	if t.Failed() {
		t.Logf("serve's stderr:\n%s", s.stderr)
	}
}

// sleeping reports whether a sandbox process of serve (pid) runs sleep.
func sleeping(pid int) bool {
	for _, p := range leftovers.SandboxProcessesOf(pid) {
		if strings.HasSuffix(p, "\tsleep") {
			return true
		}
	}
	return false
}

// TestServeStartReapsAKilledPredecessor: serve SIGKILLed with sessions
// open, an E2B sandbox and a command running leaves its cgroups and its
// workspace mounts on the host; the next serve on the same state directory
// removes them as it starts (judged from the host: the cgroup tree and
// mountinfo), and another serve running on the same state directory all
// along keeps its own.
func TestServeStartReapsAKilledPredecessor(t *testing.T) {
	state := t.TempDir()
	other, _ := drainServer(t, state)
	otherID := sessionWithFile(t, other.url)
	otherCgroups := leftovers.Cgroups(other.cmd.Process.Pid)
	otherMounts := mountsUnder(t, state)
	if len(otherCgroups) == 0 || len(otherMounts) == 0 {
		t.Fatalf("the other serve holds %d cgroups and %d mounts: the check of them would prove nothing", len(otherCgroups), len(otherMounts))
	}

	first, e2bURL := drainServer(t, state)
	pid := first.cmd.Process.Pid
	id := sessionWithFile(t, first.url)
	sessionWithFile(t, first.url)
	e2bCreate(t, e2bURL)
	go func() {
		b, _ := json.Marshal(map[string]any{"command": "sleep 30", "session_id": id, "timeout": 120})
		if resp, err := http.Post(first.url+"/commands", "application/json", strings.NewReader(string(b))); err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(60 * time.Second); !sleeping(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the session command never ran sleep; stderr:\n%s", first.stderr)
		}
	}
	stale := map[string]bool{}
	for mp := range mountsUnder(t, state) {
		if !otherMounts[mp] {
			stale[mp] = true
		}
	}
	cgroups := leftovers.Cgroups(pid)
	if len(stale) < 4 || len(cgroups) < 3 {
		t.Fatalf("the first serve holds %d mounts and %d cgroups: want at least 4 and 3", len(stale), len(cgroups))
	}
	killServe(t, first)
	// What SIGKILL alone leaves: every cgroup and mount (the proof that
	// the restart, not the kill, removes them).
	if left := leftovers.Cgroups(pid); len(left) != len(cgroups) {
		t.Fatalf("SIGKILL alone removed cgroups (%d of %d left): the test proves nothing", len(left), len(cgroups))
	}
	now := mountsUnder(t, state)
	for mp := range stale {
		if !now[mp] {
			t.Fatalf("%s unmounted by SIGKILL alone: the test proves nothing", mp)
		}
	}

	next, _ := drainServer(t, state)
	if cgs := waitEmpty(30*time.Second, func() []string { return leftovers.Cgroups(pid) }); len(cgs) > 0 {
		t.Errorf("the killed serve's cgroups are still there after the next one started: %v", cgs)
	}
	left := waitEmpty(30*time.Second, func() []string {
		var l []string
		now := mountsUnder(t, state)
		for mp := range stale {
			if now[mp] {
				l = append(l, mp)
			}
		}
		return l
	})
	if len(left) > 0 {
		t.Errorf("the killed serve's mounts are still there after the next one started: %v", left)
	}
	// The kernel killed them with their inits; the host's init reaps the
	// zombies when it gets to it.
	if procs := waitEmpty(30*time.Second, func() []string { return leftovers.SandboxProcessesOf(pid) }); len(procs) > 0 {
		t.Errorf("the killed serve's sandbox processes are still there: %v", procs)
	}
	t.Logf("the killed serve left %d cgroups and %d mounts; the next start removed them", len(cgroups), len(stale))
	// The other serve's are its own: still there, still used.
	live := map[string]bool{}
	for _, cg := range leftovers.Cgroups(other.cmd.Process.Pid) {
		live[cg] = true
	}
	for _, cg := range otherCgroups {
		if !live[cg] {
			t.Errorf("the start removed a live serve's cgroup: %s", cg)
		}
	}
	now = mountsUnder(t, state)
	for mp := range otherMounts {
		if !now[mp] {
			t.Errorf("the start unmounted a live serve's workspace: %s", mp)
		}
	}
	if code, res := call(t, "POST", other.url+"/sessions/"+otherID+"/execute", "", map[string]any{"code": "open('data').read()"}); code != 200 || res["result"] != "kept" {
		t.Errorf("the other serve's session after the start: %d %v", code, res)
	}
	sessionWithFile(t, next.url) // and the new serve works
}

// sessionWithFile opens a session on url whose workspace holds data.
func sessionWithFile(t *testing.T, url string) string {
	t.Helper()
	code, info := call(t, "POST", url+"/sessions", "", map[string]any{})
	id, _ := info["session_id"].(string)
	if code != 201 || id == "" {
		t.Fatalf("create session: %d %v", code, info)
	}
	if code, res := call(t, "POST", url+"/sessions/"+id+"/execute", "", map[string]any{"code": "open('data', 'w').write('kept')"}); code != 200 || res["success"] != true {
		t.Fatalf("session %s: %d %v", id, code, res)
	}
	return id
}
