package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/fleet"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// startCmdService is a service whose store holds the environment meta
// over the host's root (no root, no layer: its start and ready commands
// are what the tests are about).
func startCmdService(t *testing.T, meta envstore.Env, edit func(*config.Config)) *service.Service {
	t.Helper()
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.StateDir = t.TempDir()
	if edit != nil {
		edit(&cfg)
	}
	store, err := envstore.Open(filepath.Join(cfg.StateDir, "environments"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Stage()
	if err != nil {
		t.Fatal(err)
	}
	meta.Source, meta.Python, meta.Created = envstore.Source{Kind: "requirements"}, "/usr/bin/python3", time.Now()
	if _, err := store.Commit(st, meta); err != nil {
		t.Fatal(err)
	}
	return newServiceAsIs(t, cfg)
}

// processesWith are the host's processes whose command line holds marker,
// with their real uid.
func processesWith(marker string) map[int]int {
	out := map[int]int{}
	for _, p := range leftovers.HostProcesses() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), marker) {
			out[p.PID] = p.UID()
		}
	}
	return out
}

func isSandboxUID(uid int) bool {
	base, count, _ := fleet.UIDSpan()
	return uid >= base && uid < base+count
}

// A session from an environment with a start command (a web server) and
// a ready command (a fetch of it) is handed out with the server
// answering: OpenPort reaches it at once, a command of the session
// fetches it, and the server's files are the session's workspace. Judged
// from the host: the server is a process of a sandbox uid in a pid
// namespace that is not the host's, none runs for a stateless run of the
// environment, and none is left once the session closes.
func TestEnvironmentStartAndReadyCommands(t *testing.T) {
	const port = 8731
	marker := fmt.Sprintf("http.server %d", port)
	svc := startCmdService(t, envstore.Env{Name: "web",
		StartCmd: fmt.Sprintf("echo started > started.txt; exec python3 -m http.server %d --bind 127.0.0.1", port),
		ReadyCmd: fmt.Sprintf(`python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d')"`, port)}, nil)
	ctx := context.Background()
	if n := len(processesWith(marker)); n != 0 {
		t.Fatalf("%d processes serve %q before the test: another test's?", n, marker)
	}

	// A stateless run starts nothing.
	if got := mustSucceed(t, run(t, svc, "print(7)", func(r *service.Request) { r.Environment = "web" })); got != "7\n" {
		t.Fatalf("a run in the environment: %q", got)
	}
	if procs := processesWith(marker); len(procs) != 0 {
		t.Fatalf("a stateless run started the environment's start command: %v", procs)
	}

	start := time.Now()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "web"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session with a ready command created in %s", time.Since(start).Round(time.Millisecond))
	closed := false
	defer func() {
		if !closed {
			svc.CloseSession(ctx, info.ID, "")
		}
	}()
	// Ready means ready: the first connection answers, no retry.
	c, err := svc.OpenPort(ctx, service.PortRequest{SessionID: info.ID, Port: port})
	if err != nil {
		t.Fatalf("the server of a ready session: %v", err)
	}
	if code, body := get(t, c, "/"); code != 200 || !strings.Contains(body, "started.txt") {
		t.Fatalf("the server answers %d: %s", code, body)
	}
	res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID,
		Command: fmt.Sprintf(`python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:%d/started.txt').read().decode())"`, port)})
	if err != nil || !res.Success || res.Stdout != "started\n\n" {
		t.Fatalf("a command fetching the server: %v %+v", err, res)
	}
	procs := processesWith(marker)
	if len(procs) == 0 {
		t.Fatal("no host process serves the environment's start command")
	}
	hostNS, _ := os.Readlink("/proc/self/ns/pid")
	for pid, uid := range procs {
		if !isSandboxUID(uid) {
			t.Errorf("the start command's process %d runs as uid %d, not a sandbox uid", pid, uid)
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && ns == hostNS {
			t.Errorf("the start command's process %d is in the host's pid namespace", pid)
		}
	}
	if err := svc.CloseSession(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	closed = true
	for deadline := time.Now().Add(10 * time.Second); len(processesWith(marker)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the start command outlived its session: %v", processesWith(marker))
		}
	}
}

// A start command is the session's daemon, not a request in it: a
// session whose only activity is its server idles out at its idle TTL,
// and the server ends with it.
func TestEnvironmentStartCommandLetsSessionIdle(t *testing.T) {
	marker := "codecage-idle-daemon-" + strconv.Itoa(os.Getpid())
	svc := startCmdService(t, envstore.Env{Name: "daemon",
		StartCmd: fmt.Sprintf(`exec python3 -c "import time; time.sleep(600)" %s`, marker)},
		func(c *config.Config) { c.SessionIdleTTL = 2 * time.Second })
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "daemon"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, info.ID, "")
	// Without a ready command the session is handed out once the start
	// command is launched; its process comes up in a moment.
	for started := time.Now(); len(processesWith(marker)) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Since(started) > 10*time.Second {
			t.Fatal("the start command does not run once the session is handed out")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := svc.GetSession(ctx, info.ID, "")
		if service.ErrorKind(err) == service.KindSessionNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session with a running start command never idled out (2 s TTL): %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); len(processesWith(marker)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the start command outlived its idle session: %v", processesWith(marker))
		}
	}
}

// A ready command that never succeeds fails the session's creation
// within SANDBOX_ENV_READY_TIMEOUT with its last output, and the session
// and its start command are gone; a start command that fails (here: a
// program the allow-list does not hold, which start commands are held to
// as any command) fails it at once, with the start command's output.
func TestEnvironmentReadyCommandFails(t *testing.T) {
	marker := "codecage-never-ready-" + strconv.Itoa(os.Getpid())
	svc := startCmdService(t, envstore.Env{Name: "never",
		StartCmd: fmt.Sprintf(`exec python3 -c "import time; time.sleep(600)" %s`, marker),
		ReadyCmd: `echo not-yet-$((40+2)); exit 3`},
		func(c *config.Config) { c.EnvReadyTimeout = 2 * time.Second })
	ctx := context.Background()
	before := svc.SessionCount()
	start := time.Now()
	_, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "never"})
	took := time.Since(start)
	if err == nil {
		t.Fatal("a session whose ready command always fails was handed out")
	}
	msg := err.Error()
	if service.ErrorKind(err) != service.KindUnavailable || !strings.Contains(msg, "SANDBOX_ENV_READY_TIMEOUT") ||
		!strings.Contains(msg, "not-yet-42") || !strings.Contains(msg, "status 3") || !strings.Contains(msg, `"never"`) {
		t.Fatalf("the error (kind %s): %v", service.ErrorKind(err), err)
	}
	if took < 2*time.Second || took > 15*time.Second {
		t.Errorf("the ready wait took %s with a 2 s bound", took)
	}
	if n := svc.SessionCount(); n != before {
		t.Errorf("%d sessions after the failure, %d before", n, before)
	}
	for deadline := time.Now().Add(10 * time.Second); len(processesWith(marker)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the failed session's start command still runs: %v", processesWith(marker))
		}
	}

	// perl is on the host, not in SANDBOX_ALLOWED_COMMANDS.
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Fatalf("the host has no perl for the allow-list case: %v", err)
	}
	svc = startCmdService(t, envstore.Env{Name: "perl-app", StartCmd: `echo booting >&2; perl -e 'sleep 600'`, ReadyCmd: "exit 1"},
		func(c *config.Config) { c.EnvReadyTimeout = 60 * time.Second })
	start = time.Now()
	_, err = svc.CreateSession(ctx, service.SessionRequest{Environment: "perl-app"})
	took = time.Since(start)
	if err == nil {
		t.Fatal("a session whose start command cannot run was handed out")
	}
	msg = err.Error()
	if service.ErrorKind(err) != service.KindUnavailable || !strings.Contains(msg, "start command") ||
		!strings.Contains(msg, `program "perl" is not allowed`) || !strings.Contains(msg, "booting") {
		t.Fatalf("the error (kind %s): %v", service.ErrorKind(err), err)
	}
	if took > 20*time.Second {
		t.Errorf("a failed start command was noticed after %s, not at once", took)
	}
	if n := svc.SessionCount(); n != 0 {
		t.Errorf("%d sessions left after the failure", n)
	}
}

// BenchmarkSessionStartReady times opening (and closing) a session from
// an environment with nothing to start, and from one whose start command
// is a web server and whose ready command fetches it.
//
//	go test ./internal/service/ -run '^$' -bench SessionStartReady -benchtime 10x
func BenchmarkSessionStartReady(b *testing.B) {
	cfg := service.LeanTestConfig()
	cfg.StateDir = b.TempDir()
	store, err := envstore.Open(filepath.Join(cfg.StateDir, "environments"))
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range []envstore.Env{{Name: "plain"}, {Name: "web", StartCmd: "exec python3 -m http.server 8000 --bind 127.0.0.1",
		ReadyCmd: `python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000')"`}} {
		st, err := store.Stage()
		if err != nil {
			b.Fatal(err)
		}
		e.Source, e.Python, e.Created = envstore.Source{Kind: "requirements"}, "/usr/bin/python3", time.Now()
		if _, err := store.Commit(st, e); err != nil {
			b.Fatal(err)
		}
	}
	svc := newServiceAsIs(b, cfg)
	ctx := context.Background()
	for _, name := range []string{"plain", "web"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: name})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = svc.CloseSession(ctx, info.ID, "")
				b.StartTimer()
			}
		})
	}
}
