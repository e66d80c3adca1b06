package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
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
	cfg := config.DefaultConfig()
	cfg.AllowedCommands = policy.WithE2BCommands(cfg.AllowedCommands)
	return newServiceWith(t, cfg)
}

// E2B's sendStdin tests: cat echoes what it is sent, at once (no newline
// needed), and ends on closeStdin.
func TestCommandStdinIsStreamedAndClosed(t *testing.T) {
	if onGVisor() {
		t.Skip("gVisor: TestCommandInputOnGVisorIsRefused")
	}
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
	if onGVisor() {
		t.Skip("gVisor: TestCommandInputOnGVisorIsRefused")
	}
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
	if onGVisor() {
		t.Skip("gVisor: TestCommandInputOnGVisorIsRefused")
	}
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
	if onGVisor() {
		t.Skip("gVisor: TestCommandInputOnGVisorIsRefused")
	}
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
// is not the host's; typing into it (TIOCSTI) is refused; and its whole
// process tree ends when it is killed.
func TestTerminalContainment(t *testing.T) {
	if onGVisor() {
		t.Skip("gVisor: TestCommandInputOnGVisorIsRefused")
	}
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

// gVisor's commands get no stdin or terminal yet: a clear refusal.
func TestCommandInputOnGVisorIsRefused(t *testing.T) {
	if !onGVisor() {
		t.Skip("native: the tests above")
	}
	svc := e2bCommandService(t)
	_, err := svc.RunCommand(context.Background(), service.CommandRequest{Argv: []string{"cat"}, Stdin: true})
	if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "gvisor backend") {
		t.Fatalf("stdin under gVisor: %v", err)
	}
}
