package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/fleet"

	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/leftovers"
)

// server is `codecage serve` in a child process (this test binary,
// re-executed as the command).
type server struct {
	cmd    *exec.Cmd
	url    string
	stderr *strings.Builder
	exited chan error
	state  string // its SANDBOX_STATE_DIR, when the test set one
	e2bURL string // its E2B listener's, with SANDBOX_E2B_LISTEN
}

func startServe(t *testing.T, env ...string) *server {
	t.Helper()
	return startServeOn(t, "127.0.0.1:0", env...)
}

// startServeOn starts serve listening on addr.
func startServeOn(t testing.TB, addr string, env ...string) *server {
	t.Helper()
	return startServeArgs(t, []string{"serve", "--listen", addr}, env...)
}

// startServeArgs starts the command line args (serve and its flags).
func startServeArgs(t testing.TB, args []string, env ...string) *server {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startServeBinary(t, exe, args, append([]string{cliMainEnv + "=1"}, env...)...)
}

// startServeBinary starts exe (this test binary as codecage, or another
// build of it) with args.
func startServeBinary(t testing.TB, exe string, args []string, env ...string) *server {
	t.Helper()
	cmd := exec.Command(exe, args...)
	// One ready sandbox and no spare session unless the test asks (its env
	// comes after, and the last of a name wins): the default four cells
	// and a spare session are work no test of one run uses.
	cmd.Env = append(os.Environ(), append([]string{"SANDBOX_POOL_SIZE=1", "SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0"}, env...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stderr: &strings.Builder{}, exited: make(chan error, 1)}
	cmd.Stderr = &syncWriter{w: s.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// As an operator stops it, so that it unmounts its workspaces
		// (its spare session's, at least); killed if it hangs.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
			<-s.exited
			t.Errorf("serve did not stop within 45 s of SIGTERM")
		}
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		go func() { s.exited <- cmd.Wait() }()
		t.Fatalf("serve printed nothing; stderr:\n%s", s.stderr)
	}
	first := lines.Text()
	// With SANDBOX_E2B_LISTEN, the E2B listener's line comes first.
	if i := strings.Index(first, "E2B API on http://"); i >= 0 {
		s.e2bURL = strings.Fields(first[i+len("E2B API on "):])[0]
		if !lines.Scan() {
			go func() { s.exited <- cmd.Wait() }()
			t.Fatalf("serve printed one line; stderr:\n%s", s.stderr)
		}
		first = lines.Text()
	}
	go func() {
		_, _ = io.Copy(io.Discard, out)
		s.exited <- cmd.Wait()
	}()
	i := strings.Index(first, "http://")
	if i < 0 {
		t.Fatalf("serve printed %q", first)
	}
	s.url = strings.Fields(first[i:])[0]
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(s.url + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready; stderr:\n%s", s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestServeSIGTERMDuringExecutions: SIGTERM while 20 executions run lets
// them end within the grace period (cancelled, and told so), tears every
// sandbox down, and loses no audit row.
func TestServeSIGTERMDuringExecutions(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "audit.db")
	s := startServe(t, "SANDBOX_AUDIT_DB="+db, "SANDBOX_STATE_DIR="+filepath.Join(dir, "state"), "SANDBOX_SHUTDOWN_GRACE=2", "SANDBOX_RATE_LIMIT=0", "SANDBOX_KEY_CONCURRENCY=32")
	const n = 20
	type outcome struct {
		events []string
		last   string
		err    error
	}
	results := make(chan outcome, n)
	running := make(chan struct{}, n)
	for range n {
		go func() {
			var o outcome
			defer func() { results <- o }()
			req, _ := http.NewRequest("POST", s.url+"/execute", strings.NewReader(`{"code":"import time\nprint('started', flush=True)\ntime.sleep(120)","timeout":200}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				o.err = err
				running <- struct{}{}
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			signaled := false
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "event: ") {
					o.events = append(o.events, strings.TrimPrefix(line, "event: "))
					if !signaled {
						signaled = true
						running <- struct{}{}
					}
				}
				if strings.HasPrefix(line, "data: ") {
					o.last = strings.TrimPrefix(line, "data: ")
				}
			}
			if !signaled {
				running <- struct{}{}
			}
		}()
	}
	for range n {
		<-running
	}
	pid := s.cmd.Process.Pid
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.exited:
		s.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("serve exited with %v; stderr:\n%s", err, s.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve still running 60s after SIGTERM; stderr:\n%s", s.stderr)
	}
	for range n {
		o := <-results
		if o.err != nil || len(o.events) < 2 || o.events[0] != "stdout" || o.events[len(o.events)-1] != "result" {
			t.Errorf("execution: err %v, events %v", o.err, o.events)
			continue
		}
		var r struct {
			Success bool    `json:"success"`
			Limit   *string `json:"limit"`
		}
		if err := json.Unmarshal([]byte(o.last), &r); err != nil || r.Success || r.Limit == nil || *r.Limit != "canceled" {
			t.Errorf("result %s", o.last)
		}
	}
	// No audit row lost.
	store, err := audit.OpenSQLiteReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	evs, err := store.List(context.Background(), audit.Query{Kind: "execute", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	canceled, native := 0, 0
	for _, ev := range evs {
		if ev.Outcome == "canceled" {
			canceled++
		}
		if ev.Backend == "native" {
			native++
		}
	}
	if len(evs) != n || canceled != n || native != n {
		t.Fatalf("%d execute rows (%d canceled, %d on the native backend), want %d", len(evs), canceled, native, n)
	}
	// And the CLI reads them, by backend too.
	code, out, errOut := cli(t, "", "audit", "list", "--db", db, "--kind", "execute", "--backend", "native")
	if code != 0 || strings.Count(out, "\n") < n || !strings.Contains(out, "BACKEND") {
		t.Fatalf("audit list: %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := cli(t, "", "audit", "list", "--db", db, "--backend", "gvisor"); code != 0 || strings.Contains(out, "native") {
		t.Fatalf("audit list --backend gvisor: %d\n%s", code, out)
	}
	// No sandbox left behind: no process of a sandbox uid the server
	// leased, no cgroup of the server's.
	if len(fleet.UIDRangesLeasedBy(pid)) == 0 {
		t.Fatalf("no uid lease names the server (pid %d): the check below would see nothing", pid)
	}
	if procs := leftovers.SandboxProcessesOf(pid); len(procs) > 0 {
		t.Fatalf("sandbox processes left: %v", procs)
	}
	if cgs := leftovers.Cgroups(pid); len(cgs) > 0 {
		t.Fatalf("cgroups left: %v", cgs)
	}
}

func TestServeRefusesBadKeys(t *testing.T) {
	t.Setenv("SANDBOX_API_KEYS", "alice:short")
	code, _, errOut := cli(t, "", "serve", "--listen", "127.0.0.1:0")
	if code != exitUsage || !strings.Contains(errOut, "at least 16") {
		t.Fatalf("code %d: %s", code, errOut)
	}
}

func TestOpenAPICommand(t *testing.T) {
	code, out, errOut := cli(t, "", "openapi")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc.OpenAPI != "3.1.0" || doc.Paths["/execute"] == nil {
		t.Fatalf("code %d, %s %s", code, out[:min(len(out), 200)], errOut)
	}
}
