package service_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/pipfixture"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// machineCommand runs a command line in session id and fails the test
// unless it succeeded; it returns stdout.
func machineCommand(t *testing.T, svc *service.Service, id, line string, timeout time.Duration) string {
	t.Helper()
	res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: id, Owner: "o", Command: line, Timeout: timeout})
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if !res.Success {
		msg := ""
		if res.Error != nil {
			msg = *res.Error
		}
		t.Fatalf("%q: exit %d (%s)\nstdout %q\nstderr %q", line, res.ExitCode, msg, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// hostProcessNamed is the host's process whose name is name and whose
// command line has marker, or nil: the host's own account.
func hostProcessNamed(name, marker string) *leftovers.Process {
	for _, p := range leftovers.HostProcesses() {
		if p.Name != name {
			continue
		}
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if strings.Contains(string(b), marker) {
			return &p
		}
	}
	return nil
}

// A machine session is one process tree: what a command leaves running
// lives on beside the interpreter (the host sees it, in the session's
// uid), the next command and the code see it, any program of the root
// runs, scripts in the workspace run, python3 is the session's Python
// with its packages, and on close nothing of it is left on the host.
func TestMachineSessionIsOneProcessTree(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.Isolation = config.IsolationNative // gVisor's: TestGVisorMachineIsOneProcessTree
	cfg.EnableDataScience = true
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.AllowedCommands = []string{"sh", "echo"} // a machine's commands are not bound by it
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Machine: true, Home: "/home/user",
		Profiles: []string{"data_science"}, AllowedImports: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}

	// Left in the background by one command, alive for the next.
	pid := strings.TrimSpace(machineCommand(t, svc, se.ID, "sleep 4242 >/dev/null 2>&1 & echo $!", 0))
	// $! is the forked shell, which becomes sleep once it has exec'd:
	// on a slow host the next command may come first (comm still "sh").
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := machineCommand(t, svc, se.ID, "cat /proc/"+pid+"/comm", 0)
		if got == "sleep\n" {
			break
		}
		if got != "sh\n" || time.Now().After(deadline) {
			t.Fatalf("the background process is gone: %q", got)
		}
	}
	bg := hostProcessNamed("sleep", "4242")
	if bg == nil || !leftovers.Leased(bg.UID()) {
		t.Fatalf("the host sees no background sleep in a sandbox uid: %+v", bg)
	}
	// So is a command on a terminal, which runs on the machine's own.
	onTerm, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "cat /proc/" + pid + "/comm; tty",
		Terminal: &service.TerminalSize{Cols: 80, Rows: 24}})
	if err != nil || !strings.Contains(onTerm.Stdout, "sleep") || !strings.Contains(onTerm.Stdout, "/dev/pts/") {
		t.Fatalf("on a terminal: %v %+v", err, onTerm)
	}
	// The interpreter is in the same tree: it sees the process too.
	res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: "print(open('/proc/" + pid + "/comm').read().strip())"})
	if err != nil || strings.TrimSpace(res.Stdout) != "sleep" {
		t.Fatalf("the interpreter does not see the command's process: %v %+v", err, res)
	}
	// A program outside SANDBOX_ALLOWED_COMMANDS, a script of the
	// workspace, and the session's own Python with its packages.
	if got := machineCommand(t, svc, se.ID, "basename /a/b/c && dirname /a/b/c", 0); got != "c\n/a/b\n" {
		t.Fatalf("basename, dirname: %q", got)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "run.sh", []byte("#!/bin/sh\necho ran as $(whoami) in $PWD\n")); err != nil {
		t.Fatal(err)
	}
	if got := machineCommand(t, svc, se.ID, "chmod +x run.sh && ./run.sh", 0); got != "ran as user in /home/user\n" {
		t.Fatalf("./run.sh: %q", got)
	}
	if got := machineCommand(t, svc, se.ID, "python3 -c 'import sys, pandas; print(sys.executable, pandas.__name__)'", 0); got != cfg.Interpreter+" pandas\n" {
		t.Fatalf("python3: %q", got)
	}
	real, _ := filepath.EvalSymlinks(cfg.Interpreter)
	if got := machineCommand(t, svc, se.ID, "python -c 'import os, sys, pandas; print(os.path.realpath(sys.executable))'", 0); got != real+"\n" {
		t.Fatalf("python: %q", got)
	}
	// Its root is its own: what a command makes at the top of the tree,
	// the file API reads, and what the file API writes there, commands
	// read; the system directories stay read-only, and the host's files
	// never change.
	hostsBefore, _ := os.ReadFile("/etc/hosts")
	// /etc is root's, as on E2B: the user changes it through sudo.
	if got := machineCommand(t, svc, se.ID, "mkdir /workspace && echo made > /workspace/f && { echo x 2>/dev/null >> /etc/hosts || echo root-only; } && echo '10.9.8.7 mine' | sudo tee -a /etc/hosts", 0); got != "root-only\n10.9.8.7 mine\n" {
		t.Fatalf("/etc/hosts: %q", got)
	}
	if b, err := svc.ReadFile(ctx, se.ID, "o", "/workspace/f"); err != nil || string(b) != "made\n" {
		t.Fatalf("the file API reads /workspace/f: %q %v", b, err)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "/app/in.txt", []byte("written")); err != nil {
		t.Fatal(err)
	}
	if got := machineCommand(t, svc, se.ID, "cat /app/in.txt; grep -c mine /etc/hosts; touch /usr/x 2>/dev/null || echo read-only", 0); got != "written1\nread-only\n" {
		t.Fatalf("the machine's root: %q", got)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "/usr/x", []byte("x")); !errors.Is(err, service.ErrPermission) {
		t.Fatalf("the file API wrote to /usr: %v", err)
	}
	// Its /etc (an overlay, root's changes kept above what codecage
	// wrote): the file API reads what codecage wrote and writes nothing
	// there, where the sandbox would not see it.
	if b, err := svc.ReadFile(ctx, se.ID, "o", "/etc/passwd"); err != nil || !strings.Contains(string(b), "user:x:1000:1000:") {
		t.Fatalf("the file API reads /etc/passwd: %q %v", b, err)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "/etc/x.conf", []byte("x")); !errors.Is(err, service.ErrPermission) {
		t.Fatalf("the file API wrote to /etc: %v", err)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "/proc/x", []byte("x")); err == nil {
		t.Fatal("the file API wrote to /proc")
	}
	if b, _ := os.ReadFile("/etc/hosts"); string(b) != string(hostsBefore) {
		t.Fatal("the host's /etc/hosts changed")
	}
	// No timeout: the session's lifetime; one past the command bound is
	// taken too.
	machineCommand(t, svc, se.ID, "true", cfg.MaxCommandTime+time.Minute)

	// A command that outlives its time limit is ended, with what it
	// started in its group; the session lives on.
	res2, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "sleep 4343", Timeout: 300 * time.Millisecond})
	if err != nil || !res2.TimedOut {
		t.Fatalf("the timed-out command: %v %+v", err, res2)
	}
	waitFor(t, "the timed-out sleep to go", func() bool { return hostProcessNamed("sleep", "4343") == nil })
	if hostProcessNamed("sleep", "4242") == nil {
		t.Fatal("the background process died with another command's timeout")
	}

	if err := svc.CloseSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the background process to end with its session", func() bool { return hostProcessNamed("sleep", "4242") == nil })
	assertNoLeftovers(t)
}

// Where machines are not offered, asking for one is a clear refusal.
func TestMachineSessionsAreRefusedWhereNotOffered(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.MachineSessions = false
	svc := newServiceWith(t, cfg)
	_, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true})
	if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "SANDBOX_MACHINE_SESSIONS") {
		t.Fatalf("machines off: %v", err)
	}
	if svc.OffersMachines(false) {
		t.Fatal("OffersMachines with machines off")
	}
	// A command asking for longer than a plain session's bound is
	// refused, unless its timeout is a ceiling (E2B's timeoutMs 0).
	plain, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	long := service.CommandRequest{SessionID: plain.ID, Owner: "o", Command: "echo ran", Timeout: 4 * time.Hour}
	if _, err := svc.RunCommand(context.Background(), long); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a 4 h command: %v", err)
	}
	long.TimeoutCeiling = true
	if res, err := svc.RunCommand(context.Background(), long); err != nil || res.Stdout != "ran\n" {
		t.Fatalf("a 4 h ceiling: %v %+v", err, res)
	}
}

// A machine with the network profile and servers (an E2B sandbox's
// shape) serves on its loopback from a background process, which a later
// command reaches: its egress proxy does not narrow its own loopback.
func TestMachineSessionServesWithNetwork(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		return // TestMachineSessionIsOneProcessTree checks the refusal
	}
	allowed, allowedHits := loopbackServer(t, "127.0.0.2")
	denied, deniedHits := loopbackServer(t, "127.0.0.3")
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{allowed}
	cfg.AllowedImports = []string{policy.AllImports}
	svc := newServiceWith(t, cfg)
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true, Servers: true, Profiles: []string{"network"}})
	if err != nil {
		t.Fatal(err)
	}
	machineCommand(t, svc, se.ID, "python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &", 0)
	got := machineCommand(t, svc, se.ID, `python3 -c '
import socket, time
for _ in range(500):
    try:
        s = socket.create_connection(("127.0.0.1", 8123), timeout=2)
        break
    except OSError:
        time.sleep(0.02)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
print(s.recv(12).decode())
'`, 0)
	if got != "HTTP/1.0 200\n" {
		t.Fatalf("the background server answered %q", got)
	}
	// Every program goes out through the session's proxy, under the
	// operator's list: judged by the host's servers.
	if got := machineCommand(t, svc, se.ID, "curl -sS http://"+allowed+"/; curl -fsS --max-time 10 http://"+denied+"/ >/dev/null 2>&1 || echo refused", 0); got != "okrefused\n" {
		t.Fatalf("curl through the proxy: %q", got)
	}
	if allowedHits.Load() != 1 || deniedHits.Load() != 0 {
		t.Fatalf("the host's servers counted %d (allowed) and %d (denied)", allowedHits.Load(), deniedHits.Load())
	}
}

// networkMachine is a machine session with the network profile, on a
// server whose egress allows only the host of server (a URL).
func networkMachine(t *testing.T, server string) (*service.Service, *service.SessionInfo) {
	t.Helper()
	return networkMachineOn(t, server, false)
}

// networkMachineOn is networkMachine, on gVisor if asked (else on the
// suite's backend).
func networkMachineOn(t *testing.T, server string, onGVisor bool) (*service.Service, *service.SessionInfo) {
	t.Helper()
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{u.Host}
	cfg.AllowedImports = []string{policy.AllImports}
	var svc *service.Service
	if onGVisor {
		svc = containerService(t, func(c *config.Config) { c.EnableNetwork, c.NetworkAllow = true, cfg.NetworkAllow })
	} else {
		svc = newServiceWith(t, cfg)
	}
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true, Profiles: []string{"network"},
		AllowedImports: []string{policy.AllImports}, UseContainer: onGVisor})
	if err != nil {
		t.Fatal(err)
	}
	return svc, se
}

// One Python: pip install in a machine's command (through its egress
// proxy, from an index the operator allows) puts the package where the
// command's python3 and the session's interpreter both import it.
func TestMachinePipInstallIsSeenByTheInterpreter(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		return // TestMachineSessionIsOneProcessTree checks the refusal
	}
	dir := t.TempDir()
	if _, err := pipfixture.Wheel(dir, "machinegreet", "1.0", pipfixture.WheelOptions{}); err != nil {
		t.Fatal(err)
	}
	idx, err := pipfixture.ServeIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	svc, se := networkMachine(t, idx.URL)
	ctx := context.Background()
	// The interpreter looked for it before it was there.
	if res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: "import importlib.util\nprint(importlib.util.find_spec('machinegreet'))"}); err != nil || res.Stdout != "None\n" {
		t.Fatalf("before: %v %+v", err, res)
	}
	machineCommand(t, svc, se.ID, "python3 -m pip install -q --disable-pip-version-check --index-url "+idx.URL+" machinegreet", time.Minute)
	if got := machineCommand(t, svc, se.ID, "python3 -c 'import machinegreet; print(machinegreet.VALUE)'", 0); got != "machinegreet 1.0\n" {
		t.Fatalf("the command's python3: %q", got)
	}
	res, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: "import machinegreet\nprint(machinegreet.VALUE)"})
	if err != nil || res.Stdout != "machinegreet 1.0\n" {
		t.Fatalf("the interpreter: %v %+v", err, res)
	}
	if idx.Requests("/simple/machinegreet/") == 0 {
		t.Fatal("the index was not asked")
	}
}

// A process's output streams whole, however much of it there is: a
// server that logs past the output limit is not killed for it (the host
// still finds it running), and a live follower gets every byte.
func TestMachineProcessOutputStreamsWhole(t *testing.T) {
	svc, _, se := nativeMachine(t, nil)
	const size = 3_000_000 // three times the output limit
	p, err := svc.StartProcess(context.Background(), service.ProcessRequest{Command: service.CommandRequest{SessionID: se.ID, Owner: "o",
		Command: "head -c " + strconv.Itoa(size) + " /dev/zero | tr '\\0' x; echo; echo logged-all; exec sleep 6161"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	n, tail := 0, ""
	_, err = svc.FollowProcess(ctx, se.ID, "o", service.ProcessSelector{PID: &p.PID}, true, time.Minute, func(ev service.ProcessEvent) error {
		n += strings.Count(string(ev.Data), "x")
		if tail = (tail + string(ev.Data)); len(tail) > 64 {
			tail = tail[len(tail)-64:]
		}
		if strings.Contains(tail, "logged-all") {
			stop()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the process ended (%v) before it logged all", err)
	}
	if n != size {
		t.Fatalf("the follower got %d of %d bytes", n, size)
	}
	waitFor(t, "the process to run on, past its output", func() bool { return hostProcessNamed("sleep", "6161") != nil })
	if err := svc.CloseSession(context.Background(), se.ID, "o"); err != nil {
		t.Fatal(err)
	}
}

// A command that cannot start in a machine says why: here the session's
// process limit is spent by what earlier commands left running (the host
// counts them), and the next command's error names the fork's failure,
// not a cancellation.
func TestMachineCommandThatCannotStartSaysWhy(t *testing.T) {
	svc, cfg, se := nativeMachine(t, func(c *config.Config) {
		c.MaxProcesses = 24
		c.AllowedImports = []string{policy.AllImports}
	})
	// The interpreter starts sleeps until the limit refuses one, and
	// stays: nothing of the machine ends, so the limit stays spent (the
	// host counts the sleeps).
	res, err := svc.Execute(context.Background(), service.Request{SessionID: se.ID, Owner: "o", Code: `
import subprocess
kept = []
while True:
    try:
        kept.append(subprocess.Popen(["sleep", "8181"]))
    except OSError as e:
        print(e.strerror)
        break`})
	if err != nil || res.Stdout != "Resource temporarily unavailable\n" {
		t.Fatalf("filling the process limit: %v %+v", err, res)
	}
	if n := len(leftoversOf("sleep", "8181")); n == 0 || n >= cfg.MaxProcesses {
		t.Fatalf("the host counts %d sleeps under a limit of %d", n, cfg.MaxProcesses)
	}
	_, err = svc.RunCommand(context.Background(), service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "true"})
	if err == nil || !strings.Contains(err.Error(), "could not start") || !strings.Contains(err.Error(), "SANDBOX_MAX_PROCESSES") {
		t.Fatalf("a command past the process limit: %v", err)
	}
	t.Log(err)
	if err := svc.CloseSession(context.Background(), se.ID, "o"); err != nil {
		t.Fatal(err)
	}
}

// leftoversOf lists the host's processes named name whose command line
// has marker.
func leftoversOf(name, marker string) []int {
	var out []int
	for _, p := range leftovers.HostProcesses() {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if p.Name == name && strings.Contains(string(b), marker) {
			out = append(out, p.PID)
		}
	}
	return out
}

// npm install -g and pip's scripts land in the home's ~/.local, which
// leads a machine's PATH: the installed program runs by its name, and the
// host finds it in the session's workspace (the system stays read-only).
func TestMachineGlobalInstallsLandInTheHome(t *testing.T) {
	if _, err := os.Stat("/usr/bin/npm"); err != nil {
		t.Fatalf("npm is not installed (scripts/setup.sh installs it): %v", err)
	}
	svc, cfg, se := nativeMachine(t, nil)
	pkg := `{"name": "machine-greet", "version": "1.0.0", "bin": {"machine-greet": "greet.js"}}`
	machineCommand(t, svc, se.ID, "mkdir -p greet && printf '%s' '"+pkg+"' > greet/package.json && "+
		"printf '#!/usr/bin/env node\\nconsole.log(\"greetings from\", process.argv[1])\\n' > greet/greet.js", 0)
	machineCommand(t, svc, se.ID, "npm install -g --offline --no-audit --no-fund ./greet >/dev/null 2>&1", time.Minute)
	out := machineCommand(t, svc, se.ID, "machine-greet", 0)
	if !strings.HasPrefix(out, "greetings from") || !strings.Contains(out, "/.local/") {
		t.Fatalf("the installed program says %q", out)
	}
	found, _ := filepath.Glob(filepath.Join(cfg.StateDir, "sessions", "*", ".local", "lib", "node_modules", "machine-greet"))
	if len(found) != 1 {
		t.Fatalf("the host finds no machine-greet in the session's ~/.local: %v", found)
	}
}

// A machine session of the machine spares' shape is one of them: its
// sandbox was running before the create (the host reads its init's start
// time), it is a machine (what a command leaves lives on), and the fleet
// starts a new spare in its place.
func TestMachineSessionsComeFromSpares(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.Isolation = config.IsolationNative
	cfg.MachinePoolSize = 1
	svc := newServiceAsIs(t, cfg)
	const class = "machine/native"
	waitFor(t, "a machine spare", func() bool { return svc.PoolStats()[class].Ready == 1 })
	created := bootTicks(t)
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true})
	if err != nil {
		t.Fatal(err)
	}
	if st := svc.PoolStats()[class]; st.Hits != 1 {
		t.Fatalf("the create took no spare: %+v", st)
	}
	machineCommand(t, svc, se.ID, "sleep 9292 >/dev/null 2>&1 &", 0)
	var init int
	waitFor(t, "the background sleep to be the init's", func() bool {
		p := hostProcessNamed("sleep", "9292")
		if p == nil {
			return false
		}
		init = p.PPID
		return lastNSpid(init) == "1" // reparented to the machine's init
	})
	if started := startTicks(t, init); started >= created {
		t.Fatalf("the session's init started at %d ticks after boot, not before the create (%d)", started, created)
	}
	waitFor(t, "the spare to be replaced", func() bool { return svc.PoolStats()[class].Ready == 1 })
	// A machine asked in another shape (a home of its own) starts its own.
	other, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true, Home: "/home/user"})
	if err != nil {
		t.Fatal(err)
	}
	if st := svc.PoolStats()[class]; st.Hits != 1 {
		t.Fatalf("a machine of another shape took a spare: %+v", st)
	}
	if out := machineCommand(t, svc, other.ID, "pwd", 0); out != "/home/user\n" {
		t.Fatalf("the other machine's home: %q", out)
	}
}

// bootTicks is the time since boot in clock ticks, as /proc/<pid>/stat
// counts a process's start.
func bootTicks(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return int64(up * 100)
}

// startTicks is when host process pid started, in ticks since boot.
func startTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// lastNSpid is host process pid's pid in its own pid namespace.
func lastNSpid(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			return f[len(f)-1]
		}
	}
	return ""
}

// nativeMachine starts a lean native service, edited by edit (when not
// nil), and a machine session of owner "o" in it.
func nativeMachine(t *testing.T, edit func(*config.Config)) (*service.Service, config.Config, *service.SessionInfo) {
	t.Helper()
	cfg := service.LeanTestConfig()
	cfg.Isolation = config.IsolationNative
	if edit != nil {
		edit(&cfg)
	}
	svc := newServiceAsIs(t, cfg)
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true})
	if err != nil {
		t.Fatal(err)
	}
	return svc, cfg, se
}

// A listing of a machine's / shows its tree as its code sees it: below a
// mount point (/usr, /tmp, the home) what is mounted there, not the empty
// directory under it in the machine's own root, and each path once, with
// one leading slash.
func TestMachineListingShowsWhatTheSandboxSees(t *testing.T) {
	svc, _, se := nativeMachine(t, func(c *config.Config) { c.EnableFilesystem = true })
	machineCommand(t, svc, se.ID, "mkdir -p /app/x && echo a > /app/x/f && echo t > /tmp/listed-tmp && echo w > listed-home", 0)
	ctx := context.Background()
	l, err := svc.ListDir(ctx, se.ID, "o", "/", 2)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, f := range l.Files {
		seen[f.Path]++
		if strings.HasPrefix(f.Path, "//") || seen[f.Path] > 1 {
			t.Errorf("listed as %q (%d times)", f.Path, seen[f.Path])
		}
	}
	for _, want := range []string{"/usr", "/usr/bin", "/app/x", "/tmp/listed-tmp", se.Home} {
		if seen[want] == 0 {
			t.Errorf("%s is not in the listing of / two deep: %v", want, l.Files)
		}
	}
	// The home's own files, three deep (its entries are named as the
	// file API names the workspace's).
	if l, err = svc.ListDir(ctx, se.ID, "o", "/", strings.Count(se.Home, "/")+1); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range l.Files {
		found = found || strings.HasSuffix(f.Path, "listed-home")
	}
	if !found {
		t.Errorf("the home's file is not in the listing of /: %v", l.Files)
	}
}

// A program a machine lacks is named as missing from the machine, not as
// refused by an allow-list the machine does not have.
func TestMachineMissingProgramSaysSo(t *testing.T) {
	svc, _, se := nativeMachine(t, nil)
	res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: se.ID, Owner: "o", Command: "no-such-program-here --x"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 127 || res.Error == nil || !strings.Contains(*res.Error, `"no-such-program-here" is not installed in this machine`) || strings.Contains(*res.Error, "SANDBOX_ALLOWED_COMMANDS") {
		t.Fatalf("a missing program in a machine: exit %d error %v", res.ExitCode, res.Error)
	}
}
