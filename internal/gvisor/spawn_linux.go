package gvisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"golang.org/x/sys/unix"
)

// A gVisor machine (Spec.Machine) starts processes beside its program
// with runsc exec: each is a process of the sandbox's own kernel, a
// session and process group leader of its own there, and lives as long
// as the sandbox does; what it leaves in the background is reparented to
// the sandbox's init and lives on too. runsc exec's host process stays
// with it, in the sandbox's cgroup, until it ends, and exits with its
// status.

// Proc is a process started in a gVisor machine.
type Proc struct {
	s      *Sandbox
	cmd    *exec.Cmd
	pid    int // in the sandbox's root pid namespace, and its process group
	out    *jail.Output
	input  *jail.Input
	pipes  [2]*os.File // stdout, stderr read ends
	copied sync.WaitGroup
	sent   atomic.Int32  // the last signal Signal sent
	waited chan struct{} // closed when runsc exec has ended
	done   chan struct{}
	exit   jail.ProcExit
	// exitLog is runsc exec's debug log, which alone says how the
	// process ended: its exit status is 128+n for signal n, as for a
	// program that exits 128+n (exitstatus_linux.go).
	exitLog string
}

// spawnWait bounds the wait for runsc exec to report the process's pid
// (it starts a runsc and asks the sandbox: far more than 10 ms under load).
const spawnWait = 60 * time.Second

// spawnSeq names each spawn's files in the bundle.
var spawnSeq atomic.Uint64

// Spawn starts a process in the machine, as its user, or as root when
// the machine has root inside (identity).
func (s *Sandbox) Spawn(spec jail.ProcSpec) (*Proc, error) {
	if !s.spec.Machine {
		return nil, errors.New("gvisor: the sandbox is not a machine")
	}
	if spec.Root && !s.who.rootInside() {
		// Without a user namespace of its own, root of its kernel would
		// be the host's root to the files it shares (its workspace).
		return nil, errors.New("gvisor: a gVisor machine has no root inside")
	}
	s.mu.Lock()
	cg := s.cg
	s.mu.Unlock()
	if cg == nil || s.killed.Load() {
		return nil, jail.ErrEnded
	}
	name := "proc-" + strconv.FormatUint(spawnSeq.Add(1), 10)
	procFile := filepath.Join(s.dir, name+".json")
	pidFile := filepath.Join(s.dir, name+".pid")
	logFile := filepath.Join(s.dir, name+".log")
	defer os.Remove(procFile)
	defer os.Remove(pidFile)
	defer os.Remove(logFile) // runsc keeps it open; only its errors go there
	exitLog, err := s.exitLog(name)
	if err != nil {
		return nil, err
	}
	if err := writeProcess(procFile, spec, s.who.user()); err != nil {
		return nil, err
	}
	p := &Proc{s: s, done: make(chan struct{}), exitLog: exitLog}
	budget := spec.OutputBytes
	if budget <= 0 {
		budget = s.spec.Limits.OutputBytes
	}
	p.out = jail.NewOutput(budget, func() { _ = p.Signal(syscall.SIGKILL) })
	stdin, err := p.stdin(spec)
	if err != nil {
		return nil, err
	}
	args := append([]string{"-c", joinCgroup, "sh"}, cg.ProcsFiles()...)
	args = append(args, "--", s.runsc, "--root="+s.stateRoot(), "--log="+logFile, "--debug-log="+exitLog,
		"exec", "--process="+procFile, "--internal-pid-file="+pidFile, s.id)
	if err := p.start(args, stdin, spec.Terminal != nil); err != nil {
		p.input.Close()
		os.Remove(exitLog)
		return nil, err
	}
	waited := make(chan struct{})
	p.waited = waited
	var state *os.ProcessState
	go func() {
		_ = p.cmd.Wait()
		state = p.cmd.ProcessState
		close(waited)
	}()
	if t := p.input.Terminal(); t != nil {
		// What the process shows is the terminal's.
		p.copied.Add(1)
		go p.out.Copy(&p.copied, 0, t, spec.Stdout)
	}
	if err := p.readPID(pidFile, logFile, waited); err != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		p.closePipes()
		return nil, err
	}
	go p.finish(waited, func() *os.ProcessState { return state }, spec)
	return p, nil
}

// writeProcess writes the process's OCI description for runsc exec: its
// argv, whole environment and directory, as the machine's user (uid in
// its kernel) or root inside, never with a new privilege.
func writeProcess(path string, spec jail.ProcSpec, uid int) error {
	if len(spec.Argv) == 0 {
		return errors.New("gvisor: no program to start")
	}
	dir := spec.Dir
	if dir == "" {
		dir = "/"
	}
	caps := []string{}
	if spec.Root {
		// Root inside (the sandbox's user namespace maps its block): the
		// native root inside's capabilities, in gVisor's kernel alone.
		uid, caps = 0, jail.RootInsideCapabilityNames()
	}
	proc := ociProcess{
		Terminal:        spec.Terminal != nil,
		User:            ociUser{UID: uint32(uid), GID: uint32(uid)},
		Args:            spec.Argv,
		Env:             spec.Env,
		Cwd:             dir,
		NoNewPrivileges: true,
		Capabilities:    ociCapabilities{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: []string{}, Ambient: []string{}},
	}
	b, err := json.Marshal(proc)
	if err != nil {
		return fmt.Errorf("gvisor: process: %w", err)
	}
	return os.WriteFile(path, b, 0o600)
}

// stdin chooses the process's stdin: a terminal's slave (a pty of the
// host's, which gVisor's kernel serves as the process's terminal, as
// runsc's own detached exec does), a pipe the supervisor writes, or
// /dev/null.
func (p *Proc) stdin(spec jail.ProcSpec) (*os.File, error) {
	switch {
	case spec.Terminal != nil:
		master, slave, err := hostTerminal(*spec.Terminal)
		if err != nil {
			return nil, err
		}
		p.input = jail.NewInput(master, true)
		return slave, nil
	case spec.Stdin:
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("gvisor: stdin: %w", err)
		}
		p.input = jail.NewInput(w, false)
		return r, nil
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("gvisor: stdin: %w", err)
	}
	return null, nil
}

// hostTerminal opens a pty pair of the host's, of size.
func hostTerminal(size jail.WindowSize) (master, slave *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("gvisor: open a terminal: %w", err)
	}
	master = os.NewFile(uintptr(m), "terminal")
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("gvisor: unlock the terminal: %w", err)
	}
	if err := jail.SetWindowSize(master, size); err != nil {
		master.Close()
		return nil, nil, err
	}
	// The slave of this very master, not a path that could name another.
	sl, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		master.Close()
		return nil, nil, fmt.Errorf("gvisor: open the terminal's slave: %w", errno)
	}
	return master, os.NewFile(sl, "terminal-slave"), nil
}

// start starts runsc exec (through joinCgroup's shell) with stdin and
// pipes for its output, which runsc passes to the process.
func (p *Proc) start(args []string, stdin *os.File, tty bool) error {
	defer stdin.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return fmt.Errorf("gvisor: %w", err)
	}
	p.pipes = [2]*os.File{outR, errR}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, outW, errW
	cmd.Dir = p.s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if tty {
		// runsc hands its terminal, stdin here, to the process: its
		// controlling terminal, in a session of its own. runsc's own
		// complaints still reach the pipes.
		cmd.Stdout = stdin
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	}
	err = cmd.Start()
	closeAll(outW, errW)
	if err != nil {
		p.closePipes()
		return fmt.Errorf("gvisor: start runsc exec: %w", err)
	}
	p.cmd = cmd
	return nil
}

// readPID waits for runsc exec to write the process's pid, which it does
// once the process has started; a runsc that ends first failed to start
// it, and says why on the process's stderr, returned here.
func (p *Proc) readPID(path, log string, waited <-chan struct{}) error {
	deadline := time.Now().Add(spawnWait)
	read := func() (bool, error) {
		b, err := os.ReadFile(path)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			return false, nil
		}
		pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil || pid <= 0 {
			return true, fmt.Errorf("gvisor: runsc exec wrote pid %q", b)
		}
		p.pid = pid
		return true, nil
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		if ok, err := read(); ok {
			return err
		}
		select {
		case <-waited:
			// A quick process may have started and ended since the read.
			if ok, err := read(); ok {
				return err
			}
			var msg [2048]byte
			n, _ := p.pipes[1].Read(msg[:])
			why := string(bytes.TrimSpace(msg[:n]))
			if why == "" {
				why = logTailOf(log)
			}
			return fmt.Errorf("gvisor: the process could not start (runsc exec: %v): %s", p.cmd.ProcessState, why)
		case <-p.s.done:
			return jail.ErrEnded
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gvisor: runsc exec did not start the process within %v", spawnWait)
		}
	}
}

// finish copies the output until the process has ended, and records how
// it ended: runsc exec exits with its status, or 128+n for signal n.
func (p *Proc) finish(waited <-chan struct{}, state func() *os.ProcessState, spec jail.ProcSpec) {
	if p.input.Terminal() == nil {
		p.copied.Add(1)
		go p.out.Copy(&p.copied, 0, p.pipes[0], spec.Stdout)
	}
	p.copied.Add(1)
	go p.out.Copy(&p.copied, 1, p.pipes[1], spec.Stderr)
	var exit jail.ProcExit
	select {
	case <-waited:
	case <-p.s.done:
		exit.SandboxEnded = true
		<-waited // the sandbox's cgroup is killed whole
	}
	code := state().ExitCode()
	ws, known := exitStatusIn(p.exitLog)
	if code == runscFailed && !exit.SandboxEnded && !known {
		// runsc exec fails this way when the sandbox dies under it (its
		// wait on the process breaks): a moment later the supervisor has
		// seen the sandbox end too.
		select {
		case <-p.s.done:
			exit.SandboxEnded = true
		case <-time.After(sandboxEndWait):
		}
	}
	if exit.SandboxEnded {
		// At its memory limit, say so (the cgroup's OOM kill ended it).
		p.s.mu.Lock()
		exit.OOMKilled = p.s.finished && p.s.exit.OOMKilled
		p.s.mu.Unlock()
	}
	sent := int(p.sent.Load())
	switch {
	case exit.SandboxEnded || code < 0:
		exit.ExitCode, exit.Signal, exit.SandboxEnded = -1, int(syscall.SIGKILL), true
	case known && ws.Signaled():
		exit.ExitCode, exit.Signal = -1, int(ws.Signal())
	case known:
		exit.ExitCode = ws.ExitStatus()
	case code > 128 && code-128 == sent:
		// Ended by the signal sent to it (a program that exits 128+n by
		// itself cannot be told apart from that; only a sent one counts).
		exit.ExitCode, exit.Signal = -1, sent
	default:
		exit.ExitCode = code
	}
	// What is left behind in the background and still holds the pipes
	// is not waited for.
	jail.AwaitCopies(&p.copied, p.pipes[0], p.pipes[1], p.input.Terminal())
	for _, r := range p.pipes {
		go jail.DropOutput(r) // never a closed pipe for what it left running
	}
	p.input.Close()
	exit.Truncated = p.out.Truncated()
	p.exit = exit
	close(p.done)
}

// runscFailed is runsc's exit status for its own failure.
const runscFailed = 128

// sandboxEndWait bounds the wait for a sandbox's end after runsc exec
// failed: a program that exits 128 by itself waits that long.
const sandboxEndWait = 2 * time.Second

func (p *Proc) closePipes() {
	closeAll(p.pipes[:]...)
	p.input.Close()
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}

// PID is the process's pid in the sandbox's kernel.
func (p *Proc) PID() int { return p.pid }

// Done is closed once the process has ended and its output is in.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process's end.
func (p *Proc) Wait() jail.ProcExit {
	<-p.done
	return p.exit
}

// Signal sends sig to the process's group (runsc kill --pgid): the
// process and what it started, unless that left the group.
func (p *Proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	// Recorded first: the process may be gone, and its end read, before
	// runsc kill returns.
	p.sent.Store(int32(sig))
	cmd := exec.Command(p.s.runsc, "--root="+p.s.stateRoot(), "kill", "--pgid="+strconv.Itoa(p.pid), p.s.id, strconv.Itoa(int(sig)))
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	select {
	case <-p.waited:
		return nil // it ended meanwhile
	case <-p.s.done:
		return jail.ErrEnded
	default:
	}
	if p.s.killed.Load() {
		return jail.ErrEnded
	}
	return fmt.Errorf("gvisor: signal %d: %v: %s", sig, err, bytes.TrimSpace(out))
}

// WriteInput writes to the process's stdin or terminal.
func (p *Proc) WriteInput(b []byte, wait time.Duration) (int, error) { return p.input.Write(b, wait) }

// CloseInput ends the process's stdin (on a terminal, ^D is typed).
func (p *Proc) CloseInput() error { return p.input.End() }

// Resize changes the size of the process's terminal.
func (p *Proc) Resize(size jail.WindowSize) error { return p.input.Resize(size) }
