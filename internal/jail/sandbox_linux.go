package jail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Sandbox is one running sandbox.
type Sandbox struct {
	id      string
	spec    Spec
	host    Host
	cmd     *exec.Cmd
	channel *os.File
	cg      *cgroup
	hostUID int // uid allocated here, released at cleanup (0: none)
	uid     int // the uid the sandbox runs as, kept for HostUID
	start   time.Time

	killOnce sync.Once
	killed   atomic.Bool // set first thing by Kill: a Pause then fails
	mu       sync.Mutex
	limit    Limit // first reason the sandbox was killed, under mu

	pausing Pausing // frozen by Pause until Resume

	netMu sync.Mutex
	pidfd *os.File // of the init, for DialPort; nil once torn down

	output     *Output
	input      *Input   // the program's stdin pipe or terminal, or nil
	machine    *machine // Spec.Machine's processes, or nil
	enforcer   *Enforcer
	exitReport *programExit
	done       chan struct{}
	exit       Exit
}

// Start builds a sandbox for spec and starts its program. It returns once
// the program runs under every limit; until then nothing can reach it.
func Start(ctx context.Context, spec Spec) (*Sandbox, error) {
	return startOn(ctx, spec, ProbeHost())
}

// startOn is Start on a host as probed (a test takes its cgroups away).
func startOn(ctx context.Context, spec Spec, host Host) (*Sandbox, error) {
	if err := host.Usable(); err != nil {
		return nil, err
	}
	if err := prepareSpec(&spec); err != nil {
		return nil, err
	}
	s, err := newSandbox(spec, host)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			s.cleanup()
		}
	}()

	if spec.Nested && host.Cgroup.version == 0 {
		return nil, fmt.Errorf("%w: nested sandboxes need cgroups (%s)", ErrUnsupported, host.Cgroup.reason)
	}
	fds, err := s.openFiles()
	if err != nil {
		return nil, err
	}
	defer fds.closeChildEnds()
	cgf, err := s.prepareInit(fds)
	if err != nil {
		return nil, err
	}
	if cgf != nil {
		defer cgf.Close()
	}

	waited, err := s.startInit()
	if err != nil {
		fds.closeParentEnds()
		_ = fds.channel.Close()
		return nil, fmt.Errorf("%w: start init: %v", ErrSetup, err)
	}
	started = true
	s.start = time.Now()

	if err := s.configure(fds); err != nil {
		s.Kill(LimitNone)
		<-waited
		fds.closeParentEnds()
		_ = fds.channel.Close()
		s.input.Close()
		s.cleanup()
		return nil, err
	}
	s.handOver(fds)
	if spec.Machine {
		s.machine = &machine{ctl: fds.control, answers: make(chan spawnAnswer, 1), procs: map[uint64]*Proc{}}
		go s.refreshProcs()
	}
	go s.supervise(ctx, fds, waited)
	return s, nil
}

// newSandbox makes the sandbox's output, cgroup and enforcer.
func newSandbox(spec Spec, host Host) (*Sandbox, error) {
	s := &Sandbox{id: spec.ID, spec: spec, host: host, done: make(chan struct{})}
	s.output = NewOutput(spec.Limits.OutputBytes, func() { s.Kill(LimitOutput) })
	var err error
	var usage func() time.Duration // no cgroup: no CPU time to read
	if host.Cgroup.version != 0 {
		if s.cg, err = newCgroup(host.Cgroup, s.id, spec.Limits, true); err != nil {
			return nil, err
		}
		usage = s.cg.cpuUsage
	}
	s.enforcer = NewEnforcer(s.Kill, usage, s.output)
	return s, nil
}

// openFiles opens the descriptors the init is given: its sockets and
// pipes, the workspace and binds, and the root's sources. On failure it
// closes all it opened.
func (s *Sandbox) openFiles() (*sandboxFiles, error) {
	spec := s.spec
	fds, err := newSandboxFiles(spec.Workspace, mountedBinds(spec), spec.Forward != nil, spec.SeqPacketChannel, spec.Stdin)
	if err != nil {
		return nil, err
	}
	s.channel = fds.channel
	if spec.MachineRoot != "" {
		if fds.machineRoot, fds.machineRootPath, err = openMachineRoot(spec); err != nil {
			fds.closeParentEnds()
			_ = fds.channel.Close()
			fds.closeChildEnds()
			return nil, err
		}
	}
	if spec.Root != "" {
		if fds.root, err = openRootSources(spec.Root, spec.Programs, reservedPaths(spec.Home, spec.ReadOnlyBinds, mountedBinds(spec))); err != nil {
			fds.closeParentEnds()
			_ = fds.channel.Close()
			fds.closeChildEnds()
			return nil, err
		}
	}
	return fds, nil
}

// prepareInit builds the init's command and, on cgroups v2, has it start
// in the sandbox's cgroup: it returns the cgroup's descriptor (nil on
// v1), which the caller closes once the init has started.
func (s *Sandbox) prepareInit(fds *sandboxFiles) (*os.File, error) {
	var err error
	if s.hostUID, s.uid, s.cmd, err = s.command(fds); err != nil {
		fds.closeParentEnds()
		_ = fds.channel.Close()
		return nil, err
	}
	if s.cg == nil || s.cg.version != 2 {
		return nil, nil
	}
	cgf, err := s.cg.openV2()
	if err != nil {
		fds.closeParentEnds()
		return nil, err
	}
	s.cmd.SysProcAttr.UseCgroupFD = true
	s.cmd.SysProcAttr.CgroupFD = int(cgf.Fd())
	return cgf, nil
}

// handOver gives the supervisor's ends that outlive Start to their owners.
func (s *Sandbox) handOver(fds *sandboxFiles) {
	if fds.stdin != nil {
		// The pipe's write end now belongs to the sandbox's input.
		s.input = NewInput(fds.stdin, false)
		fds.stdin = nil
	}
	if s.spec.Forward != nil {
		// The supervisor's end now belongs to the receiver.
		sock := fds.forward
		fds.forward = nil
		go receiveForwards(sock, s.spec.Forward.Handle)
	}
}

// prepareSpec checks what Start cannot build from and fills in the
// defaults: the limits, and an ID when the caller gave none.
func prepareSpec(spec *Spec) error {
	if len(spec.Argv) == 0 {
		return errors.New("jail: empty argv")
	}
	if err := CheckHome(spec.Home); err != nil {
		return err
	}
	if spec.CellUIDs < 0 || spec.CellUIDs > MaxCellUIDs {
		return fmt.Errorf("jail: %d cell uids, at most %d", spec.CellUIDs, MaxCellUIDs)
	}
	if spec.Terminal != nil {
		if err := spec.Terminal.Check(); err != nil {
			return err
		}
		if spec.Nested {
			return errors.New("jail: a nested program gets no terminal")
		}
		spec.Stdin = false // the terminal is its input
	}
	if spec.Programs != nil && spec.Programs.Root != spec.Root {
		return fmt.Errorf("jail: the programs were resolved in root %q, the sandbox's root is %q", spec.Programs.Root, spec.Root)
	}
	if (spec.MachineRoot != "" || len(spec.Links) > 0) && !spec.Machine {
		return errors.New("jail: a machine root and links need a machine")
	}
	if err := checkLinks(spec.Links); err != nil {
		return err
	}
	if spec.Machine && (spec.Nested || spec.NoChannel && spec.Programs != nil) {
		return errors.New("jail: a machine runs its own processes: neither nested nor a command jail")
	}
	if spec.RootInside && (!spec.Machine || spec.MachineRoot == "" || spec.HostUID != 0 && spec.HostUID-SandboxUID < HostUIDBase) {
		return errors.New("jail: root inside needs a machine with a root of its own (sudo and /usr/local live there), and its host uid the user's of a block of ids (ReserveUIDs(MachineIDs)+SandboxUID)")
	}
	if spec.Nested && spec.NetNS != nil {
		return errors.New("jail: a nested program's cells make network namespaces of their own: it joins none")
	}
	spec.Limits = spec.Limits.WithDefaults()
	if spec.ID == "" {
		spec.ID = NewID()
	} else if !validID(spec.ID) {
		return fmt.Errorf("jail: bad sandbox id %q", spec.ID)
	}
	return nil
}

// startInit starts the sandbox's init. The goroutine that starts it owns
// its OS thread until the init is reaped: Pdeathsig fires when that thread
// ends (go.dev/issue/27505). waited is closed once the init is reaped.
func (s *Sandbox) startInit() (waited chan struct{}, err error) {
	startErr := make(chan error, 1)
	waited = make(chan struct{})
	go func() {
		runtime.LockOSThread()
		// A sandbox that joins a namespace is cloned from a thread in it
		// (setns), which then goes back to the host's.
		back, err := enterNetns(s.spec.NetNS)
		if err != nil {
			runtime.UnlockOSThread()
			startErr <- err
			return
		}
		err = s.cmd.Start()
		if back() {
			defer runtime.UnlockOSThread()
		} // else the thread ends with this goroutine: it never serves another
		if err != nil {
			startErr <- err
			return
		}
		s.openPidfd() // before the Wait below can reap the init
		startErr <- nil
		_ = s.cmd.Wait()
		close(waited)
	}()
	return waited, <-startErr
}

// supervise enforces the limits the kernel does not, collects the output and
// the exit report, and tears the sandbox down.
func (s *Sandbox) supervise(ctx context.Context, fds *sandboxFiles, waited <-chan struct{}) {
	var copiers sync.WaitGroup
	copiers.Add(2)
	go s.output.Copy(&copiers, 0, fds.stdout, s.spec.Stdout)
	go s.output.Copy(&copiers, 1, fds.stderr, s.spec.Stderr)
	if t := s.input.Terminal(); t != nil {
		// The terminal's output is the program's stdout; its read ends
		// (EIO) once no process of the sandbox holds the terminal.
		copiers.Add(1)
		go s.output.Copy(&copiers, 0, t, s.spec.Stdout)
	}
	reportDone := make(chan struct{})
	go func() {
		defer close(reportDone)
		for {
			var rep initReport
			if err := fds.controlDec.Decode(&rep); err != nil {
				return
			}
			if rep.Exited != nil {
				s.exitReport = rep.Exited
			}
			s.machine.report(rep, fds.controlRights)
		}
	}()

	s.enforcer.Run(ctx, s.spec.Limits.Timeout, s.spec.Limits.CPUTime, waited)
	// The init is gone, so is every process of its pid namespace, and so are
	// the write ends of the pipes: the readers finish.
	<-reportDone
	copiers.Wait()
	s.finish()
	s.machine.close()
	fds.closeParentEnds()
	s.input.Close()
	s.cleanup()
	close(s.done)
}

// finish turns what was observed into the Exit.
func (s *Sandbox) finish() {
	s.mu.Lock()
	limit := s.limit
	s.mu.Unlock()
	e := Exit{ExitCode: -1, Signal: int(syscall.SIGKILL), Limit: limit, Duration: time.Since(s.start)}
	e.Truncated = s.output.Truncated()
	if r := s.exitReport; r != nil {
		e.ExitCode, e.Signal = r.Code, r.Signal
		e.PeakMemoryBytes = r.MaxRSSKiB * 1024
		e.CPUTime = time.Duration(r.CPUNanos)
	}
	if s.cg != nil {
		if peak := s.cg.memoryPeak(); peak > 0 {
			e.PeakMemoryBytes = peak
		}
		if cpu := s.cg.cpuUsage(); cpu > 0 {
			e.CPUTime = cpu
		}
		if s.cg.oomKills() > 0 {
			e.OOMKilled = true
		}
	}
	if e.Limit == LimitNone {
		switch {
		case e.OOMKilled:
			e.Limit = LimitMemory
		case e.Signal == int(syscall.SIGXCPU),
			e.Signal == int(syscall.SIGKILL) && e.CPUTime >= s.spec.Limits.CPUTime:
			e.Limit = LimitCPU
		}
	}
	s.exit = e
}

// Kill ends the sandbox at once: SIGKILL to the init takes the whole pid
// namespace with it. The first reason given is the one reported.
func (s *Sandbox) Kill(reason Limit) {
	s.killOnce.Do(func() {
		s.killed.Store(true)
		s.mu.Lock()
		s.limit = reason
		s.mu.Unlock()
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Kill() // through a pidfd: never a recycled pid
		}
		if s.cg != nil {
			s.cg.thawAfterKill() // a paused sandbox dies as it thaws
		}
	})
}

// Arm gives the sandbox's next piece of work its own limits, counted from
// now: a wall-clock timeout, a CPU budget (cgroup accounting; the rlimit set
// at start still bounds each process), a fresh output budget, and ctx,
// whose end kills the sandbox.
// Pools and sessions arm sandboxes that were started before the work came.
func (s *Sandbox) Arm(ctx context.Context, timeout, cpu time.Duration) {
	s.enforcer.Arm(ctx, timeout, cpu)
}

// SetCPU changes the sandbox's CPU bandwidth to cores (see
// Limits.CPUCores): a session's idle allowance between requests, its
// limit during one. Nothing when the host offers no cpu controller.
func (s *Sandbox) SetCPU(cores float64) error {
	if s.cg == nil {
		return nil
	}
	return s.cg.setCPU(cores)
}

// CPUUsage is the CPU time every process of the sandbox has used so far
// (its cgroup's), or 0 without a cgroup.
func (s *Sandbox) CPUUsage() time.Duration {
	if s.cg == nil {
		return 0
	}
	return s.cg.cpuUsage()
}

// Channel is the supervisor's end of the program's channel (fd 3 inside).
func (s *Sandbox) Channel() *os.File { return s.channel }

// HostUID is the host uid the sandbox's processes run as.
func (s *Sandbox) HostUID() int { return s.uid }

// ID identifies the sandbox (and names its cgroup).
func (s *Sandbox) ID() string { return s.id }

// Layers reports the isolation layers this sandbox has.
func (s *Sandbox) Layers() Layers { return s.host.Layers() }

// Done is closed when the sandbox is gone and torn down.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Wait blocks until the sandbox is gone and torn down.
func (s *Sandbox) Wait() Exit {
	<-s.done
	return s.exit
}

// cleanup runs once. s.cg stays set: SetCPU and CPUUsage may still come,
// and a destroyed cgroup refuses them.
func (s *Sandbox) cleanup() {
	s.closePidfd()
	if s.cg != nil {
		_ = s.cg.destroy()
	}
	releaseUID(s.hostUID)
	s.hostUID = 0
}

func programRlimits(l Limits, cgroups bool) []rlimit {
	cpu := uint64((l.CPUTime + time.Second - 1) / time.Second)
	rl := []rlimit{
		// SIGXCPU at the limit, SIGKILL a second later if it is ignored.
		{unix.RLIMIT_CPU, cpu, cpu + 1},
		{unix.RLIMIT_FSIZE, uint64(l.FileSizeBytes), uint64(l.FileSizeBytes)},
		{unix.RLIMIT_NOFILE, uint64(l.OpenFiles), uint64(l.OpenFiles)},
		// Counted per uid, so the init adds its own threads (see startProgram).
		{unix.RLIMIT_NPROC, uint64(l.MaxProcesses), uint64(l.MaxProcesses)},
		{unix.RLIMIT_CORE, 0, 0},
	}
	if !cgroups {
		rl = append(rl, rlimit{unix.RLIMIT_AS, uint64(l.MemoryBytes), uint64(l.MemoryBytes)})
	}
	return rl
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func forwardPort(f *Forward) int {
	if f == nil {
		return 0
	}
	return f.Port
}

// mountedBinds are spec's binds, then its shared /tmp (initConfig.SharedTmp).
func mountedBinds(spec Spec) []Bind {
	if spec.Tmp == "" {
		return spec.Binds
	}
	return append(slices.Clip(spec.Binds), Bind{Host: spec.Tmp, Path: "/tmp"})
}

// bindMounts says which Spec.Binds entries come as detached mounts.
func bindMounts(files []*os.File) []bool {
	out := make([]bool, len(files))
	for i, f := range files {
		out[i] = f != nil
	}
	return out
}

func rootEntriesOf(src *rootSources) []rootEntry {
	if src == nil {
		return nil
	}
	return src.entries
}

func rootPathOf(src *rootSources) string {
	if src == nil {
		return ""
	}
	return src.initPath
}
