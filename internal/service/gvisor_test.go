package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// containerService is a native-by-default service whose requests may ask
// for gVisor (use_container). It fails, never skips, without a working
// runsc: scripts/setup.sh installs it.
func containerService(t *testing.T, edit ...func(*config.Config)) *service.Service {
	t.Helper()
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work on this host (scripts/setup.sh installs runsc): %s", info.Error)
	}
	cfg := service.LeanTestConfig()
	cfg.Isolation = config.IsolationNative
	cfg.EnableContainerMode = true
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.DataPoolSize, cfg.GVisorPoolSize, cfg.GVisorDataPoolSize = 1, 0, 1, 0
	for _, e := range edit {
		e(&cfg)
	}
	return newServiceAsIs(t, cfg)
}

func TestUseContainerSelectsTheBackend(t *testing.T) {
	svc := containerService(t)
	ctx := context.Background()
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(host.Release[:])
	code := "import os\nprint(os.getuid() != 0)\nos.uname().release"
	for _, use := range []bool{false, true, true} { // the second gVisor run comes from the refilled pool
		res, err := svc.Execute(ctx, service.Request{Code: code, UseContainer: use})
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{false: "native", true: "gvisor"}[use]
		if !res.Success || res.Backend != want || res.Stdout != "True\n" {
			t.Fatalf("use_container=%v: backend %q success %v stdout %q error %+v stderr %q", use, res.Backend, res.Success, res.Stdout, res.Error, res.Stderr)
		}
		// Under gVisor the code talks to gVisor's kernel, not the host's.
		if sameKernel := string(res.Result) == `"`+hostRelease+`"`; sameKernel == use {
			t.Fatalf("use_container=%v: the code sees kernel %s, the host runs %s", use, res.Result, hostRelease)
		}
	}
	// A run answers before its gVisor sandbox has shut down: all of the
	// output is still there, streamed and whole, and the usage too.
	var lines int
	res, err := svc.Execute(ctx, service.Request{UseContainer: true, OnOutput: func(stream, line string) { lines++ },
		Code: "import sys\nfor i in range(2000): print('x' * 99)\nsys.stderr.write('e' * 70000)\n7"})
	if err != nil || !res.Success || len(res.Stdout) != 200000 || len(res.Stderr) != 70000 || lines != 2000 || string(res.Result) != "7" {
		t.Fatalf("output: %v success %v stdout %d stderr %d lines %d result %s", err, res.Success, len(res.Stdout), len(res.Stderr), lines, res.Result)
	}
	if res.Resources.CPUTimeSeconds <= 0 || res.Resources.PeakMemoryBytes <= 0 || res.ExecutionTime <= 0 {
		t.Fatalf("usage: %+v %v", res.Resources, res.ExecutionTime)
	}
	// The same limits hold: a timeout, and a memory limit.
	res, err = svc.Execute(ctx, service.Request{Code: "while True: pass", UseContainer: true, Timeout: 1e9})
	if err != nil || !res.TimedOut || res.Backend != "gvisor" {
		t.Fatalf("timeout: %v %+v", err, res)
	}
	res, err = svc.Execute(ctx, service.Request{Code: "x = bytearray(600 << 20)", UseContainer: true, MemoryBytes: 128 << 20})
	if err != nil || res.Success || res.Limit == nil || *res.Limit != "memory" {
		t.Fatalf("memory: %v %+v", err, res)
	}
	// Without container mode, asking is a clear error.
	off := containerService(t, func(c *config.Config) { c.EnableContainerMode = false; c.GVisorPoolSize = 0 })
	_, err = off.Execute(ctx, service.Request{Code: "1", UseContainer: true})
	if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "SANDBOX_ENABLE_CONTAINER_MODE") {
		t.Fatalf("container mode off: %v", err)
	}
	// The network profile under gVisor: the proxy is the only way out
	// (scripts/test.sh runs the whole network test against gVisor too).
	net := containerService(t, func(c *config.Config) { c.EnableNetwork = true })
	res, err = net.Execute(ctx, service.Request{UseContainer: true, Profiles: []string{"network"}, Code: `import socket, os
def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=3)
        return "connected"
    except OSError as e:
        return e.errno
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT 10.1.2.3:443 HTTP/1.1\r\nHost: 10.1.2.3:443\r\n\r\n")
[os.environ.get("HTTPS_PROXY"), s.recv(100).split()[1].decode(), direct("1.1.1.1", 443)]`})
	if err != nil || !res.Success || res.Backend != "gvisor" {
		t.Fatalf("network under gVisor: %v %+v", err, res)
	}
	var got []any
	if err := json.Unmarshal(res.Result, &got); err != nil || len(got) != 3 || got[0] == nil || got[1] != "403" || got[2] == "connected" {
		t.Fatalf("network under gVisor: %s", res.Result)
	}
}

func TestGVisorSessionWithFilesAndPipInstall(t *testing.T) {
	wh := wheelhouse(t)
	svc := containerService(t, func(c *config.Config) { c.PipFindLinks = wh; c.PipMaxDownload = 2 << 20 })
	ctx := context.Background()
	rec := &recorder{}
	svc.SetObserver(rec)
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", UseContainer: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Backend != "gvisor" {
		t.Fatalf("session backend %q", info.Backend)
	}
	run := func(code string) *service.Result {
		t.Helper()
		r, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Code: code})
		if err != nil {
			t.Fatal(err)
		}
		if r.Backend != "gvisor" {
			t.Fatalf("run in a gVisor session reports backend %q", r.Backend)
		}
		return r
	}
	if r := run("x = 41\nopen('notes.txt', 'w').write('from the code')"); !r.Success {
		t.Fatalf("cell 1: %+v", r.Error)
	}
	if r := run("x + 1"); string(r.Result) != "42" {
		t.Fatalf("state did not persist: %s %+v", r.Result, r.Error)
	}
	// The file API sees the code's files, and the code sees the API's.
	got, err := svc.ReadFile(ctx, info.ID, "o", "notes.txt")
	if err != nil || string(got) != "from the code" {
		t.Fatalf("ReadFile: %v %q", err, got)
	}
	if _, err := svc.WriteFile(ctx, info.ID, "o", "data/in.txt", []byte("from the API")); err != nil {
		t.Fatal(err)
	}
	if r := run("open('data/in.txt').read()"); string(r.Result) != `"from the API"` {
		t.Fatalf("the code did not see the API's file: %s %+v", r.Result, r.Error)
	}
	// pip_install into a gVisor session: pip runs in the native jail, the
	// package lands in the session's own directory, which gVisor binds.
	res, err := svc.PipInstall(ctx, service.InstallRequest{Package: "greet", SessionID: info.ID, Owner: "o"})
	if err != nil || !res.Success {
		t.Fatalf("install: %v %+v", err, res)
	}
	if r := run("import greet, colorlib\ngreet.VALUE"); string(r.Result) != `"greet 2.0"` {
		t.Fatalf("import after install: %s %+v", r.Result, r.Error)
	}
	// run_command in a gVisor session: the command jail (native, see
	// README) works on the same workspace, as the same owner.
	cmd, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: "cat notes.txt; echo more >> notes.txt"})
	if err != nil || !cmd.Success || cmd.Stdout != "from the code" {
		t.Fatalf("command in a gVisor session: %v %+v", err, cmd)
	}
	if r := run("open('notes.txt').read()"); string(r.Result) != `"from the codemore\n"` {
		t.Fatalf("the code did not see the command's write: %s %+v", r.Result, r.Error)
	}
	// A stateless gVisor run does not see the session's package.
	if r, err := svc.Execute(ctx, service.Request{Code: "import greet", UseContainer: true}); err != nil || r.Success {
		t.Fatalf("a stateless run imported the session's package: %v %+v", err, r)
	}
	// A session's backend is chosen when it is created.
	native, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Execute(ctx, service.Request{SessionID: native.ID, Owner: "o", Code: "1", UseContainer: true}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("use_container in a native session: %v", err)
	}
	if err := svc.CloseSession(ctx, info.ID, "o"); err != nil {
		t.Fatal(err)
	}
	// The audit log and metrics learn which backend ran each event's code.
	// A gVisor session's commands run under gVisor where its runsc refuses
	// code from noexec mounts (the pinned one), else natively.
	commands := "native"
	if svc.Info().ContainerMode.GVisor.EnforcesNoexec {
		commands = "gvisor"
	}
	for kind, want := range map[string][]string{
		service.EventSession: {"gvisor", "native", ""}, // create, create, close
		service.EventCommand: {commands},
		service.EventInstall: {"native"},
	} {
		if got := rec.backends(kind); !slices.Equal(got, want) {
			t.Errorf("%s events ran on %q, want %q", kind, got, want)
		}
	}
	if got := rec.backends(service.EventExecute); len(got) < 5 || slices.ContainsFunc(got, func(b string) bool { return b != "gvisor" && b != "" }) {
		t.Errorf("execute events ran on %q", got)
	}
	assertNoLeftovers(t)
}

// With SANDBOX_ISOLATION=gvisor, validate_code's analyzer parses the
// untrusted source under gVisor too: a runsc that logs each sandbox it runs
// shows one more run per validation.
func TestGVisorIsolationRunsTheAnalyzer(t *testing.T) {
	real, err := exec.LookPath("runsc")
	if err != nil {
		t.Fatalf("runsc is not installed (scripts/setup.sh installs it): %v", err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "runs")
	wrapper := filepath.Join(dir, "runsc")
	script := "#!/bin/sh\nfor a; do [ \"$a\" = run ] && echo run >> " + log + "; done\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	svc := containerService(t, func(c *config.Config) {
		c.Isolation, c.Runsc = config.IsolationGVisor, wrapper
		c.GVisorPoolSize, c.GVisorSessionPoolSize = 0, 0 // nothing else boots
	})
	rec := &recorder{}
	svc.SetObserver(rec)
	runs := func() int {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "run\n")
	}
	before := runs()
	v, err := svc.Validate(context.Background(), service.ValidateRequest{Code: "import os\nx = (1 +\n"})
	if err != nil || v.Validation.Valid || v.SyntaxError == nil {
		t.Fatalf("validate under gVisor: %v %+v", err, v)
	}
	if after := runs(); after != before+1 {
		t.Fatalf("runsc ran %d sandboxes for one validation, want 1", after-before)
	}
	if got := rec.backends(service.EventValidate); !slices.Equal(got, []string{"gvisor"}) {
		t.Fatalf("the validation was recorded on %q", got)
	}
}
