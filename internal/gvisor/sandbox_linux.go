package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
)

// Sandbox is one running gVisor sandbox.
type Sandbox struct {
	id       string
	spec     jail.Spec
	dir      string
	cmd      *exec.Cmd
	runsc    string // the binary, and the platform it runs on
	platform string
	mounts   []ociMount // the bundle's, as a restore must match them
	channel  *os.File
	cg       *jail.Cgroup
	uid      int
	who      identity // uid, and its block with root inside
	ownRoot  bool     // a machine on its own root on the host (ownroot_linux.go)
	ownUID   bool     // the uid was allocated here and is released at teardown
	start    time.Time
	forward  net.Listener // the host end of spec.Forward, or nil
	input    *jail.Input  // the program's stdin or terminal, or nil

	killOnce sync.Once
	killed   atomic.Bool  // set first thing by Kill: a Pause then fails
	pausing  jail.Pausing // paused by Pause until Resume
	mu       sync.Mutex
	limit    jail.Limit // first reason the sandbox was killed, under mu
	log      string     // the end of runsc's log when it failed
	output   *jail.Output
	enforcer *jail.Enforcer
	done     chan struct{}
	exit     jail.Exit
	finished bool // exit is set (finish), under mu; the cgroup may be gone
}

// joinCgroup is the shell that starts runsc: it moves itself into the
// sandbox's cgroup (each file given before "--"), then becomes runsc, so
// every process runsc starts is counted and limited from its first
// instruction. Go cannot run code between fork and exec, and cgroup v1 has
// no CLONE_INTO_CGROUP.
const joinCgroup = `for f; do [ "$f" = -- ] && break; echo 0 > "$f" || exit 125; shift; done; shift; exec "$@"`

// Start runs spec's program in a new gVisor sandbox. Unlike the native
// jail, the channel is the program's stdin (runsc passes a program its
// standard descriptors only; the harness moves it to fd 3), the program
// runs as spec.HostUID (or a uid allocated for it) inside too, Programs
// (a minimal root) has no Landlock behind it (gVisor has none; see
// writeBundle), and Nested and SeqPacketChannel are not supported. The
// gVisor kernel boots in the background: the program may start a few
// hundred milliseconds after Start returns.
func Start(ctx context.Context, rt Runtime, spec jail.Spec) (*Sandbox, error) {
	switch {
	case len(spec.Argv) == 0:
		return nil, errors.New("gvisor: empty argv")
	case spec.Nested, spec.SeqPacketChannel:
		return nil, fmt.Errorf("%w: the gvisor backend has no zygotes", jail.ErrUnsupported)
	}
	if err := jail.CheckHome(spec.Home); err != nil {
		return nil, err
	}
	if spec.Terminal != nil {
		if err := spec.Terminal.Check(); err != nil {
			return nil, err
		}
		spec.Stdin = false // the terminal is its input
	}
	runsc, err := rt.binary()
	if err != nil {
		return nil, err
	}
	s, undo, err := prepare(rt, runsc, rt.platform(), spec)
	if err != nil {
		return nil, err
	}
	defer undo.run()
	if err := s.launch("run", "--bundle", s.dir, s.id); err != nil {
		return nil, err
	}
	undo.release()
	return s, nil
}

// prepare makes everything a sandbox of spec runs in (its uid, bundle,
// forward socket, cgroup), short of runsc itself; undo takes it all down
// again until released.
func prepare(rt Runtime, runsc, platform string, spec jail.Spec) (s *Sandbox, undo *cleanup, err error) {
	spec.Limits = spec.Limits.WithDefaults()
	if spec.ID == "" {
		spec.ID = jail.NewID()
	}
	s = &Sandbox{id: spec.ID, spec: spec, runsc: runsc, platform: platform, done: make(chan struct{}), start: time.Now()}
	s.output = jail.NewOutput(spec.Limits.OutputBytes, func() { s.Kill(jail.LimitOutput) })
	s.uid = spec.HostUID
	if s.uid == 0 {
		uid, err := jail.ReserveUID()
		if err != nil {
			return nil, nil, fmt.Errorf("gvisor: %w", err)
		}
		s.uid, s.ownUID = uid, true
	}
	// One step undoes them all: cleanup takes down whatever exists so far
	// (bundle and its mounts, forward socket, cgroup and its processes, uid).
	// A local: each error return sets the named undo to nil.
	steps := &cleanup{}
	undo = steps
	steps.add(s.cleanup)
	defer func() {
		if err != nil {
			steps.run()
		}
	}()
	reapStale(rt.stateDir())
	s.dir = filepath.Join(rt.stateDir(), strconv.Itoa(os.Getpid())+"-"+s.id)
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("gvisor: %w", err)
	}
	if spec.Forward != nil {
		if err := s.listenForward(); err != nil {
			return nil, nil, err
		}
	}
	s.who = identityOf(spec, s.uid)
	if err := s.who.reach(s.dir); err != nil {
		return nil, nil, fmt.Errorf("gvisor: %w", err)
	}
	if s.mounts, err = writeBundle(s.dir, spec, s.who); err != nil {
		return nil, nil, fmt.Errorf("gvisor: bundle: %w", err)
	}
	s.ownRoot = ownsRoot(spec, s.who)
	// The limit covers gVisor's own kernel too; its tasks include the
	// Sentry's threads and, on ptrace, a stub per address space.
	s.cg, err = jail.NewCgroup("gv-"+s.id, spec.Limits.MemoryBytes+SentryHeadroom, 256+8*spec.Limits.MaxProcesses, spec.Limits.CPUCores)
	if err != nil {
		return nil, nil, fmt.Errorf("gvisor: %w", err)
	}
	s.enforcer = jail.NewEnforcer(s.Kill, s.cg.CPUUsage, s.output)
	return s, undo, nil
}

// globalFlags are runsc's flags for this sandbox, the same for every
// command on it (run, restore, checkpoint) but the log file: its state
// root and platform, and how it is confined.
func (s *Sandbox) globalFlags(log string) []string {
	// A machine's root takes writes, in an overlay of the sandbox's
	// memory (counted in its cgroup, kept by a checkpoint).
	// A machine on its own root writes through to the host instead.
	overlay := "none"
	if s.spec.Machine && !s.ownRoot {
		overlay = "root:memory"
	}
	// The root of a machine on its own root is the host's too (the file
	// API writes there while it runs): gVisor's kernel revalidates what
	// it caches of it, as of a bind mount, instead of owning it.
	access := "exclusive"
	if s.ownRoot {
		access = "shared"
	}
	flags := []string{
		"--root=" + s.stateRoot(),
		"--file-access=" + access,
		"--log=" + filepath.Join(s.dir, log),
		"--platform=" + s.platform,
		"--network=none",
		"--ignore-cgroups",
		"--overlay2=" + overlay,
		"--oci-seccomp",
		"--host-uds=" + hostUDS(s.forward != nil),
	}
	if s.who.contained {
		// Without CAP_SYS_ADMIN runsc cannot give a Sentry that opens host
		// files itself (directfs) its minimal chroot: the gofer serves them.
		flags = append(flags, "--directfs=false")
	}
	return flags
}

// launch starts runsc's command (run, restore) in the foreground, in the
// sandbox's cgroup, with the harness's channel on its stdin and pipes on
// its stdout and stderr: restore needs descriptors of the same kinds as
// the run that made the image had.
func (s *Sandbox) launch(command ...string) error {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("gvisor: channel: %w", err)
	}
	s.channel = os.NewFile(uintptr(pair[0]), "channel")
	inside := os.NewFile(uintptr(pair[1]), "channel-inside")
	defer inside.Close()
	stdin, console, command, err := s.launchStdin(inside, command)
	if err != nil {
		return err
	}
	if stdin != inside {
		defer stdin.Close()
	}
	if console != nil {
		defer console.Close()
	}
	outR, errR, err := s.startRunsc(stdin, command)
	if err != nil {
		return err
	}
	waited := make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(waited)
	}()
	if console != nil {
		if err := s.takeConsole(console, waited); err != nil {
			// supervise tears the sandbox down once runsc is gone.
			s.Kill(jail.LimitNone)
			go s.supervise(outR, errR, waited)
			<-s.done
			return err
		}
	}
	go s.supervise(outR, errR, waited)
	return nil
}

// launchStdin chooses runsc's stdin: the harness's channel (inside), a
// pipe the supervisor writes, or /dev/null. A terminal keeps the channel
// and adds a console socket, whose flag goes into command. launch closes
// what it returns once runsc has it.
func (s *Sandbox) launchStdin(inside *os.File, command []string) (*os.File, *net.UnixListener, []string, error) {
	switch {
	case s.spec.Terminal != nil:
		l, path, err := s.listenConsole()
		if err != nil {
			return nil, nil, nil, err
		}
		// runsc's flags before its last argument, the sandbox's id.
		last := len(command) - 1
		command = append(append(append([]string{}, command[:last]...), "--console-socket="+path), command[last])
		return inside, l, command, nil
	case s.spec.Stdin:
		// A command's stdin is a pipe of its own, not the channel (which
		// a command has no use for): the supervisor writes its other end.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("gvisor: stdin: %w", err)
		}
		s.input = jail.NewInput(w, false)
		return r, nil, command, nil
	case s.spec.NoChannel:
		// A program that is not the harness reads /dev/null, as in the
		// native jail, and never holds the channel.
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("gvisor: stdin: %w", err)
		}
		return null, nil, command, nil
	}
	return inside, nil, command, nil
}

// startRunsc starts runsc's command in the sandbox's cgroup, and returns
// the read ends of its stdout and stderr.
func (s *Sandbox) startRunsc(stdin *os.File, command []string) (outR, errR *os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, err
	}
	args := append([]string{"-c", joinCgroup, "sh"}, s.cg.ProcsFiles()...)
	args = append(append(append(args, "--", s.runsc), s.globalFlags("runsc.log")...), command...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, outW, errW
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, fmt.Errorf("gvisor: start runsc: %w", err)
	}
	s.cmd = cmd // from now on supervise tears down, and closes no channel
	return outR, errR, nil
}

// takeConsole receives the terminal's master from runsc, sizes it, makes
// it raw and makes it the program's input.
func (s *Sandbox) takeConsole(console *net.UnixListener, waited <-chan struct{}) error {
	master, err := receiveConsole(console, waited)
	if err != nil {
		return err
	}
	err = jail.SetWindowSize(master, *s.spec.Terminal)
	if err == nil {
		err = makeRaw(master)
	}
	if err != nil {
		_ = master.Close()
		return err
	}
	s.input = jail.NewInput(master, true)
	return nil
}

// supervise enforces the limits gVisor does not, collects the output, and
// tears the sandbox down when runsc ends.
func (s *Sandbox) supervise(outR, errR *os.File, waited <-chan struct{}) {
	var copiers sync.WaitGroup
	copiers.Add(2)
	if t := s.input.Terminal(); t != nil {
		// The program's output is the terminal's; runsc's own stdout
		// carries nothing of it.
		copiers.Add(1)
		go s.output.Copy(&copiers, 0, t, s.spec.Stdout)
		go func() {
			defer copiers.Done()
			_, _ = io.Copy(io.Discard, outR)
		}()
	} else {
		go s.output.Copy(&copiers, 0, outR, s.spec.Stdout)
	}
	go s.output.Copy(&copiers, 1, errR, s.spec.Stderr)
	// The CPU budget counts from now: what the cgroup holds so far is the
	// shell that started runsc.
	s.enforcer.Run(context.Background(), s.spec.Limits.Timeout, s.spec.Limits.CPUTime+s.cg.CPUUsage(), waited)
	// runsc is gone; its Gofer and Sentry may outlive it for a moment, and
	// hold the output pipes open until they go.
	_ = s.cg.KillAll()
	copiers.Wait()
	outR.Close()
	errR.Close()
	s.finish()
	if s.exit.ExitCode != 0 && s.exit.Limit == jail.LimitNone {
		s.log = logTail(s.dir)
	}
	s.cleanup()
	close(s.done)
}

// finish turns what was observed into the Exit. runsc exits with the
// program's status, or 128+n when signal n ended it.
func (s *Sandbox) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := jail.Exit{ExitCode: -1, Signal: int(syscall.SIGKILL), Limit: s.limit, Duration: time.Since(s.start)}
	e.Truncated = s.output.Truncated()
	if st := s.cmd.ProcessState; st != nil && s.limit == jail.LimitNone {
		ws := st.Sys().(syscall.WaitStatus)
		switch code := ws.ExitStatus(); {
		case ws.Signaled():
			e.Signal = int(ws.Signal())
		case code > 128 && code < 128+65:
			e.Signal = code - 128
		default:
			e.ExitCode, e.Signal = code, 0
		}
	}
	e.PeakMemoryBytes = s.cg.MemoryPeak()
	e.CPUTime = s.cg.CPUUsage() - s.enforcer.CPUBase()
	e.OOMKilled = s.cg.OOMKilled()
	if e.Limit == jail.LimitNone && e.OOMKilled {
		e.Limit = jail.LimitMemory
	}
	s.exit, s.finished = e, true
}

// Kill ends the sandbox at once: every process of its cgroup (runsc, the
// Sentry, the Gofer) gets SIGKILL. The first reason given is the one
// reported.
func (s *Sandbox) Kill(reason jail.Limit) {
	s.killOnce.Do(func() {
		s.killed.Store(true)
		s.mu.Lock()
		s.limit = reason
		cg := s.cg
		s.mu.Unlock()
		if cg != nil {
			go func() { _ = cg.KillAll() }()
		}
	})
}

// Arm gives the sandbox's next piece of work its own limits, counted from
// now: a wall-clock timeout, a CPU budget, a fresh output budget, and ctx,
// whose end kills the sandbox.
func (s *Sandbox) Arm(ctx context.Context, timeout, cpu time.Duration) {
	s.enforcer.Arm(ctx, timeout, cpu)
}

// SetCPU changes the sandbox's CPU bandwidth (its cgroup's, the Sentry's
// own work included) to cores.
func (s *Sandbox) SetCPU(cores float64) error {
	s.mu.Lock()
	cg := s.cg
	s.mu.Unlock()
	if cg == nil {
		return errors.New("gvisor: the sandbox has ended")
	}
	return cg.SetCPU(cores)
}

// MemoryUsage is the memory of the sandbox's host processes now (its
// cgroup's: the sentry holds the sandbox's memory).
func (s *Sandbox) MemoryUsage() int64 {
	s.mu.Lock()
	cg := s.cg
	s.mu.Unlock()
	if cg == nil {
		return 0
	}
	return cg.MemoryUsage()
}

// CPUUsage is the CPU time the sandbox (its cgroup) has used so far.
func (s *Sandbox) CPUUsage() time.Duration {
	s.mu.Lock()
	cg := s.cg
	s.mu.Unlock()
	if cg == nil {
		return 0
	}
	return cg.CPUUsage()
}

// Usage is the CPU time used since the last Arm and the peak memory of
// the sandbox (its cgroup), so far.
func (s *Sandbox) Usage() (cpu time.Duration, peakMemory int64) {
	s.mu.Lock()
	cg, finished, exit := s.cg, s.finished, s.exit
	s.mu.Unlock()
	if finished {
		// Its cgroup may be gone already: what finish read before.
		return exit.CPUTime, exit.PeakMemoryBytes
	}
	if cg == nil {
		return 0, 0
	}
	return cg.CPUUsage() - s.enforcer.CPUBase(), cg.MemoryPeak()
}

// Log is the end of runsc's own log when the sandbox failed, for a
// diagnosis; valid after Wait.
func (s *Sandbox) Log() string { return s.log }

// Channel is the supervisor's end of the program's channel.
func (s *Sandbox) Channel() *os.File { return s.channel }

// HostUID is the uid the program runs as, inside and (for the files it
// writes through the Gofer) outside.
func (s *Sandbox) HostUID() int { return s.uid }

// ID identifies the sandbox.
func (s *Sandbox) ID() string { return s.id }

// Done is closed when the sandbox is gone and torn down.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Wait blocks until the sandbox is gone and torn down.
func (s *Sandbox) Wait() jail.Exit {
	<-s.done
	return s.exit
}

func (s *Sandbox) cleanup() {
	s.input.Close()
	if s.forward != nil {
		_ = s.forward.Close()
	}
	if s.cmd == nil && s.channel != nil {
		_ = s.channel.Close() // never started: nobody else closes it
	}
	s.mu.Lock()
	cg := s.cg
	s.cg = nil // under mu: Kill and Usage may run now
	s.mu.Unlock()
	if cg != nil {
		_ = cg.KillAll()
		_ = cg.Destroy()
	}
	if s.dir != "" {
		removeBundle(s.dir)
	}
	if s.ownUID {
		jail.ReleaseUID(s.uid)
		s.ownUID = false
	}
}

func (rt Runtime) binary() (string, error) {
	name := rt.Runsc
	if name == "" {
		if fi, err := os.Stat(PinnedRunsc); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return PinnedRunsc, nil
		}
		name = "runsc"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found (scripts/setup.sh installs one)", ErrUnavailable, name)
	}
	return p, nil
}

// platform is rt's platform, or the one the probe picked for its runsc.
func (rt Runtime) platform() string {
	if rt.Platform == "" || rt.Platform == PlatformAuto {
		return Probe(Runtime{Runsc: rt.Runsc}).Platform
	}
	return rt.Platform
}

func (rt Runtime) stateDir() string {
	if rt.StateDir == "" {
		return DefaultStateDir
	}
	return rt.StateDir
}

var reaped sync.Map // state directories already reaped

// reapStale removes, once per state directory, the bundles of supervisors
// that died without tearing down (their processes: jail's cgroup reaper).
func reapStale(dir string) {
	if _, done := reaped.LoadOrStore(dir, true); done {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		pidStr, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			removeBundle(filepath.Join(dir, e.Name()))
		}
	}
}

// logTail returns the end of runsc's log, for an error message.
func logTail(dir string) string { return logTailOf(filepath.Join(dir, "runsc.log")) }

// logTailOf returns the last lines of a runsc log file.
func logTailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}
