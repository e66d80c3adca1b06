package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// interactive is a command started with input, run in the background.
type interactive struct {
	mu    sync.Mutex
	out   strings.Builder
	in    *service.CommandInput
	ready chan struct{}
	done  chan struct{}
	res   *service.CommandResult
	err   error
}

func startInteractive(t *testing.T, svc *service.Service, ctx context.Context, req service.CommandRequest) *interactive {
	t.Helper()
	x := &interactive{ready: make(chan struct{}), done: make(chan struct{})}
	also := req.OnOutput
	req.OnOutput = func(stream, text string) {
		x.mu.Lock()
		x.out.WriteString(text)
		x.mu.Unlock()
		if also != nil {
			also(stream, text)
		}
	}
	req.OnInput = func(in *service.CommandInput) { x.in = in }
	req.OnStart = func() { close(x.ready) }
	go func() {
		defer close(x.done)
		x.res, x.err = svc.RunCommand(ctx, req)
	}()
	select {
	case <-x.ready:
	case <-x.done:
		t.Fatalf("the command did not start: %v", x.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not start in 30 s")
	}
	if x.in == nil {
		t.Fatal("no input was handed over")
	}
	return x
}

func (x *interactive) output() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.out.String()
}

// waitFor waits until the output holds want, then returns it.
func (x *interactive) waitFor(t *testing.T, want string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := x.output()
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output: %q", want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (x *interactive) send(t *testing.T, s string) {
	t.Helper()
	if err := x.in.Write([]byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

func (x *interactive) wait(t *testing.T) *service.CommandResult {
	t.Helper()
	select {
	case <-x.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not end")
	}
	if x.err != nil {
		t.Fatal(x.err)
	}
	return x.res
}

func e2bCommandService(t *testing.T) *service.Service {
	cfg := service.LeanTestConfig()
	cfg.AllowedCommands = policy.WithE2BCommands(cfg.AllowedCommands)
	return newServiceWith(t, cfg)
}

// E2B's sendStdin tests: cat echoes what it is sent, at once (no newline
// needed), and ends on closeStdin.
func TestCommandStdinIsStreamedAndClosed(t *testing.T) {
	svc := newPolicyService(t)
	x := startInteractive(t, svc, context.Background(), service.CommandRequest{Argv: []string{"cat"}, Stdin: true})
	x.send(t, "Hello, World!")
	x.waitFor(t, "Hello, World!")
	x.send(t, "\n!@#$%^&*()_+")
	x.waitFor(t, "!@#$%^&*()_+")
	if err := x.in.Close(); err != nil {
		t.Fatal(err)
	}
	res := x.wait(t)
	if !res.Success || res.Stdout != "Hello, World!\n!@#$%^&*()_+" {
		t.Fatalf("cat's result: %+v", res)
	}
	if err := x.in.Write([]byte("late")); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a write after the end: %v, want an invalid request", err)
	}
	if err := x.in.Write(make([]byte, service.MaxInputChunk+1)); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("an oversized write: %v", err)
	}
	// Without stdin, a command reads an empty one, as before.
	r := runCmd(t, svc, service.CommandRequest{Command: "cat; echo end"})
	if !r.Success || r.Stdout != "end\n" {
		t.Fatalf("cat without stdin: %+v", r)
	}
}

// What cat writes in one go is one output, newlines and all (E2B's
// test_send_multiline_string_to_process takes the first stdout event).
func TestCommandOutputChunkKeepsItsLines(t *testing.T) {
	svc := newPolicyService(t)
	var mu sync.Mutex
	var chunks []string
	x := startInteractive(t, svc, context.Background(), service.CommandRequest{Argv: []string{"cat"}, Stdin: true,
		OnOutput: func(_, text string) { mu.Lock(); chunks = append(chunks, text); mu.Unlock() }})
	x.send(t, "Hello,\nWorld!")
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(chunks, "")
		first := append([]string(nil), chunks...)
		mu.Unlock()
		if strings.Contains(got, "World!") {
			if first[0] != "Hello,\nWorld!" {
				t.Fatalf("outputs %q, want one \"Hello,\\nWorld!\"", first)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outputs %q", first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = x.in.Close()
	x.wait(t)
}

// A command that does not read its stdin pushes back: the write waits,
// then fails busy; the host holds no more than the pipe does.
func TestCommandStdinPushesBack(t *testing.T) {
	svc := e2bCommandService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := startInteractive(t, svc, ctx, service.CommandRequest{Argv: []string{"sleep", "60"}, Stdin: true})
	start := time.Now()
	var err error
	for i := 0; i < 3 && err == nil; i++ {
		err = x.in.Write(make([]byte, service.MaxInputChunk))
	}
	if !errors.Is(err, service.ErrBusy) || !strings.Contains(err.Error(), "has not read its input") {
		t.Fatalf("3 MiB to a command that does not read: %v", err)
	}
	if took := time.Since(start); took > service.InputWait+5*time.Second {
		t.Fatalf("the write took %s", took)
	}
	cancel()
	x.wait(t)
}

// E2B's pty tests: bash -i on a terminal, with its prompt, echo, line
// editing, its tty's name, and a resize that stty sees.
func TestCommandTerminalRunsAnInteractiveBash(t *testing.T) {
	svc := e2bCommandService(t)
	x := startInteractive(t, svc, context.Background(), service.CommandRequest{
		Argv: []string{"/bin/bash", "-i", "-l"}, Terminal: &service.TerminalSize{Cols: 80, Rows: 24},
		Env: map[string]string{"PS1": "prompt> "},
	})
	x.waitFor(t, "prompt> ")
	x.send(t, "tty; stty size\n")
	x.waitFor(t, "/dev/pts/0")
	x.waitFor(t, "24 80")
	if err := x.in.Resize(100, 30); err != nil {
		t.Fatal(err)
	}
	x.send(t, "stty size\n")
	x.waitFor(t, "30 100")
	// Line editing: a backspace (DEL) takes back the typed x.
	x.send(t, "echo ab\x7fc$((6*7))\n")
	x.waitFor(t, "ac42")
	x.send(t, "exit 3\n")
	res := x.wait(t)
	if res.ExitCode != 3 || !strings.Contains(res.Stdout, "prompt> ") {
		t.Fatalf("bash's end: exit %d, %q", res.ExitCode, res.Stdout)
	}
	if err := x.in.Resize(0, 24); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a 0-column terminal: %v", err)
	}
	if _, err := svc.RunCommand(context.Background(), service.CommandRequest{Argv: []string{"bash"}, Terminal: &service.TerminalSize{Cols: 5000, Rows: 24}}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a 5000-column terminal: %v", err)
	}
}

// A terminal is no way out, judged from the host: its processes run as a
// sandbox uid, in the sandbox's cgroup and pid namespace, on a devpts that
// is not the host's (under gVisor: no host process at all, see
// gvisorTerminalIsInside); typing into it (TIOCSTI) is refused; and its
// whole process tree ends when it is killed.
func TestTerminalContainment(t *testing.T) {
	svc := e2bCommandService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := startInteractive(t, svc, ctx, service.CommandRequest{
		Argv: []string{"/bin/bash", "-i"}, Terminal: &service.TerminalSize{Cols: 80, Rows: 24},
		Env: map[string]string{"PS1": "$ "},
	})
	x.send(t, "sleep 1000 & echo bg=$!\n")
	x.waitFor(t, "bg=")
	// TIOCSTI would type a command into the shell's own terminal; the
	// shell would run it and print INJ42.
	x.send(t, `python3 -c 'import fcntl, termios
for c in b"echo INJ$((6*7))\n": fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))'; echo sti=$?`+"\n")
	x.waitFor(t, "sti=")
	x.send(t, "echo done$((1+1))\n")
	out := x.waitFor(t, "done2")
	if strings.Contains(out, "INJ42") || !strings.Contains(out, "Operation not permitted") {
		t.Fatalf("TIOCSTI typed into the terminal: %q", out)
	}

	if onGVisor() {
		gvisorTerminalIsInside(t, x, cancel)
		return
	}
	var hostPts syscall.Stat_t
	if err := syscall.Stat("/dev/pts/ptmx", &hostPts); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Readlink("/proc/self/ns/pid")
	var sleepPID int
	procs := sandboxProcesses(t)
	for _, p := range procs {
		pidText, name, _ := strings.Cut(p, " ")
		pid, _ := strconv.Atoi(pidText)
		if !strings.HasSuffix(name, "sleep") && !strings.HasSuffix(name, "bash") {
			continue
		}
		if strings.HasSuffix(name, "sleep") {
			sleepPID = pid
		}
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if ns == "" || ns == self || !strings.Contains(string(cg), "/codecage/") {
			t.Fatalf("%s: pid namespace %q (the host's is %q), cgroups %q", p, ns, self, cg)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/fd/0", pid), &st); err != nil {
			t.Fatalf("%s: its terminal: %v", p, err)
		}
		if st.Dev == hostPts.Dev {
			t.Fatalf("%s: its terminal is on the host's devpts", p)
		}
	}
	if sleepPID == 0 {
		t.Fatalf("the terminal's background sleep is not among the sandbox processes: %v", procs)
	}
	cancel() // E2B's pty.kill
	x.wait(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", sleepPID)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal's background sleep (pid %d) outlived the kill", sleepPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gvisorTerminalIsInside judges a gVisor terminal from the host: the
// shell and its background sleep are no host processes (gVisor's kernel
// runs them), every host process of the sandbox's cgroup is runsc's, and
// the kill takes the cgroup and those processes away.
func gvisorTerminalIsInside(t *testing.T, x *interactive, cancel func()) {
	t.Helper()
	runsc, err := filepath.EvalSymlinks(gvisor.PinnedRunsc)
	if err != nil {
		t.Fatal(err)
	}
	x.send(t, "tty; echo tty=$?\n")
	if out := x.waitFor(t, "tty=0"); !regexp.MustCompile(`/dev/pts/[0-9]+\r\ntty=0`).MatchString(out) {
		t.Fatalf("the terminal inside is not a terminal of gVisor's devpts: %q", out)
	}
	cgs := sandboxCgroups(t)
	if len(cgs) == 0 {
		t.Fatal("the terminal's sandbox has no cgroup of this test's")
	}
	// Every sandbox of this test's (a pool's too) holds runsc's processes
	// only; the terminal's is the one whose runsc was given a console.
	var pids []int
	for _, cg := range cgs {
		b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		var these []int
		console := false
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
			if err != nil {
				continue // gone meanwhile
			}
			if exe != runsc {
				t.Fatalf("host process %d of the sandbox's cgroup %s runs %s, not runsc", pid, cg, exe)
			}
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			console = console || strings.Contains(string(cmdline), "--console-socket=")
			these = append(these, pid)
		}
		if console {
			pids = append(pids, these...)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no runsc with a console in the sandbox cgroups %v", cgs)
	}
	for _, p := range hostProcessesNamed(t, "sleep", "bash") {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if strings.Contains(string(cmdline), "1000") || strings.Contains(string(cmdline), "-i") {
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p))
			if strings.Contains(string(cg), "gv-") {
				t.Fatalf("host process %d (%q) runs in a gVisor sandbox's cgroup: the terminal's programs left the Sentry", p, cmdline)
			}
		}
	}
	cancel() // E2B's pty.kill
	x.wait(t)
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
				t.Fatalf("runsc's process %d outlived the kill: %q %s %.300s", pid, cmd, cg, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	assertNoLeftovers(t)
}

// hostProcessesNamed lists the host's processes whose command is one of names.
func hostProcessesNamed(t *testing.T, names ...string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if slices.Contains(names, strings.TrimSpace(string(comm))) {
			pids = append(pids, pid)
		}
	}
	return pids
}
