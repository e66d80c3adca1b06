package jail

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The supervisor's side of a machine (Spec.Machine): Spawn orders its
// init to start a process beside the program, in the same namespaces,
// cgroup and restrictions; the process's output comes back on pipes of
// its own, under a budget of its own.

// Proc is a process started in a machine.
type Proc struct {
	s      *Sandbox
	id     uint64
	pid    int
	out    *Output
	ooms   int64       // the machine's OOM kills when it started
	pipes  [2]*os.File // stdout, stderr read ends
	input  *Input
	ended  chan ProcExit // the init's report, or the sandbox's end
	done   chan struct{}
	exit   ProcExit
	copied sync.WaitGroup
}

// machine is a machine sandbox's supervisor state.
//
// Lock order: spawnMu, then mu or ctlMu, never both of those at once.
// The report reader takes mu alone; Signal takes ctlMu alone.
type machine struct {
	// spawnMu makes spawns one at a time: each order waits for its
	// answer, so answers need no matching.
	spawnMu sync.Mutex
	answers chan spawnAnswer
	// ctlMu guards writes to the control socket, and closed.
	ctlMu  sync.Mutex
	ctl    *os.File
	closed bool
	// mu guards procs and next.
	mu    sync.Mutex
	procs map[uint64]*Proc
	next  uint64
}

// spawnAnswer is the init's answer to a spawn, with the terminal's
// master when it started one (else -1).
type spawnAnswer struct {
	spawnedReport
	master int
}

// Spawn starts a process in the machine and returns once it runs (or
// could not start). ErrEnded: the machine has ended.
func (s *Sandbox) Spawn(spec ProcSpec) (*Proc, error) {
	m := s.machine
	if err := s.checkSpawn(&spec); err != nil {
		return nil, err
	}
	if s.killed.Load() {
		return nil, ErrEnded
	}
	if err := s.roomToSpawn(); err != nil {
		return nil, fmt.Errorf("jail: start %s: %w", spec.Argv[0], err)
	}
	budget := spec.OutputBytes
	if budget <= 0 {
		budget = s.spec.Limits.OutputBytes
	}
	p := &Proc{s: s, ended: make(chan ProcExit, 1), done: make(chan struct{})}
	if s.cg != nil {
		p.ooms = s.cg.oomKills()
	}
	p.out = NewOutput(budget, func() { _ = p.Signal(syscall.SIGKILL) })
	child, err := p.openPipes(spec.Stdin)
	if err != nil {
		return nil, err
	}
	defer closeAll(child[:]...)

	s.refreshProc() // what the process reads in /proc is the machine's now
	m.spawnMu.Lock()
	defer m.spawnMu.Unlock()
	m.mu.Lock()
	m.next++
	p.id = m.next
	m.procs[p.id] = p
	m.mu.Unlock()
	order := supervisorOrder{Spawn: &spawnOrder{ID: p.id, Argv: spec.Argv, Env: spec.Env, Dir: spec.Dir, Terminal: spec.Terminal, Root: spec.Root}}
	err = m.send(order, int(child[0].Fd()), int(child[1].Fd()), int(child[2].Fd()))
	var ans spawnAnswer
	if err == nil {
		select {
		case ans = <-m.answers:
		case <-s.done:
			err = ErrEnded
		}
	}
	if err == nil && ans.Error != "" {
		err = fmt.Errorf("jail: start %s: %s", spec.Argv[0], ans.Error)
	}
	if err == nil && spec.Terminal != nil {
		err = p.takeTerminal(ans.master)
	} else if ans.master >= 0 {
		_ = unix.Close(ans.master)
	}
	if err != nil {
		m.forget(p.id)
		p.closePipes()
		return nil, err
	}
	p.pid = ans.PID
	p.copied.Add(2)
	go p.out.Copy(&p.copied, 0, p.pipes[0], spec.Stdout)
	go p.out.Copy(&p.copied, 1, p.pipes[1], spec.Stderr)
	if t := p.input.Terminal(); t != nil {
		p.copied.Add(1)
		go p.out.Copy(&p.copied, 0, t, spec.Stdout)
	}
	go p.finish()
	return p, nil
}

// checkSpawn refuses a spec the machine cannot start; a terminal is the
// process's input.
func (s *Sandbox) checkSpawn(spec *ProcSpec) error {
	switch {
	case s.machine == nil:
		return fmt.Errorf("jail: Spawn: sandbox %s is not a machine", s.id)
	case len(spec.Argv) == 0:
		return fmt.Errorf("jail: Spawn: empty argv")
	case spec.Root && !s.rootInside():
		return fmt.Errorf("jail: Spawn: sandbox %s has no root inside (Spec.RootInside, root on the host)", s.id)
	}
	if spec.Terminal != nil {
		if err := spec.Terminal.Check(); err != nil {
			return err
		}
		spec.Stdin = false
	}
	return nil
}

// roomToSpawn refuses a spawn when the machine's processes hold all the
// tasks they may (its cgroup's pids.max but the init's room): the init
// forks a spawn without RLIMIT_NPROC's check, so without this, spawns
// would take the room its own threads need, and a Go runtime that cannot
// start a thread ends the machine.
func (s *Sandbox) roomToSpawn() error {
	if s.cg == nil {
		return nil
	}
	limit := s.cg.readInt(cgPidsMax)
	if limit > 0 && s.cg.readInt(cgPidsCurrent) >= limit-MachineThreads {
		return fmt.Errorf("the machine's processes are at their limit: %w", unix.EAGAIN)
	}
	return nil
}

// takeTerminal makes the master the init sent the process's input; what
// the terminal shows is read from it.
func (p *Proc) takeTerminal(master int) error {
	if master < 0 {
		return fmt.Errorf("%w: the init sent no terminal", ErrSetup)
	}
	in, err := newTerminal(master)
	if err != nil {
		_ = unix.Close(master)
		return err
	}
	p.input = in
	return nil
}

// openPipes makes the process's stdin (or /dev/null), stdout and stderr,
// keeps the supervisor's ends, and returns the child's.
func (p *Proc) openPipes(stdin bool) (child [3]*os.File, err error) {
	defer func() {
		if err != nil {
			closeAll(child[:]...)
			p.closePipes()
		}
	}()
	if stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return child, err
		}
		child[0], p.input = r, NewInput(w, false)
	} else if child[0], err = os.Open(os.DevNull); err != nil {
		return child, err
	}
	for i := range p.pipes {
		r, w, err := os.Pipe()
		if err != nil {
			return child, err
		}
		p.pipes[i], child[1+i] = r, w
	}
	return child, nil
}

func (p *Proc) closePipes() {
	closeAll(p.pipes[:]...)
	p.input.Close()
}

// finish waits for the process's end, then for its output (a while),
// and records its exit.
func (p *Proc) finish() {
	var exit ProcExit
	select {
	case exit = <-p.ended:
	case <-p.s.done:
		exit = ProcExit{ExitCode: -1, Signal: int(syscall.SIGKILL), SandboxEnded: true}
	}
	// A process left behind that still holds the pipes is not waited
	// for: its later output is read and dropped (drop), so that it never
	// dies of a closed pipe.
	AwaitCopies(&p.copied, p.pipes[0], p.pipes[1], p.input.Terminal())
	for _, r := range p.pipes {
		go DropOutput(r)
	}
	p.input.Close()
	exit.Truncated = p.out.Truncated()
	// Killed, itself or (137, a shell's word for it) its child, while the
	// OOM killer ended processes of the machine.
	killed := exit.Signal == int(syscall.SIGKILL) || exit.ExitCode == 128+int(syscall.SIGKILL)
	if killed && !exit.SandboxEnded && p.s.cg != nil && p.s.cg.oomKills() > p.ooms {
		exit.OOMKilled = true
	}
	p.exit = exit
	close(p.done)
}

// PID is the process's pid inside the machine.
func (p *Proc) PID() int { return p.pid }

// Done is closed once the process has ended and its output is in.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process's end and returns it.
func (p *Proc) Wait() ProcExit {
	<-p.done
	return p.exit
}

// Signal sends sig to the process and its process group (what it
// started, unless it left the group). Nothing once it has ended.
func (p *Proc) Signal(sig syscall.Signal) error {
	return p.s.machine.send(supervisorOrder{Signal: &signalOrder{ID: p.id, Signal: int(sig)}})
}

// WriteInput writes to the process's stdin (see Input.Write).
func (p *Proc) WriteInput(b []byte, wait time.Duration) (int, error) { return p.input.Write(b, wait) }

// CloseInput ends the process's stdin (on a terminal, ^D is typed).
func (p *Proc) CloseInput() error { return p.input.End() }

// Resize changes the size of the process's terminal.
func (p *Proc) Resize(size WindowSize) error { return p.input.Resize(size) }

// send writes one order to the init.
func (m *machine) send(o supervisorOrder, fds ...int) error {
	m.ctlMu.Lock()
	defer m.ctlMu.Unlock()
	if m.closed {
		return ErrEnded
	}
	if err := sendWithFDs(m.ctl, o, fds...); err != nil {
		return fmt.Errorf("%w: %v", ErrEnded, err)
	}
	return nil
}

// close stops orders before the control socket closes.
func (m *machine) close() {
	if m == nil {
		return
	}
	m.ctlMu.Lock()
	m.closed = true
	m.ctlMu.Unlock()
}

func (m *machine) forget(id uint64) *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.procs[id]
	delete(m.procs, id)
	return p
}

// report takes a machine's report from the init; a terminal's master
// comes with its answer, in rights.
func (m *machine) report(rep initReport, rights *rightsReader) {
	if m == nil {
		return
	}
	switch {
	case rep.Spawned != nil:
		ans := spawnAnswer{spawnedReport: *rep.Spawned, master: -1}
		if ans.Terminal {
			ans.master = rights.take()
		}
		select {
		case m.answers <- ans:
		default: // no spawn waits: it gave up as the sandbox ended
			if ans.master >= 0 {
				_ = unix.Close(ans.master)
			}
		}
	case rep.ProcExited != nil:
		if p := m.forget(rep.ProcExited.ID); p != nil {
			p.ended <- ProcExit{ExitCode: rep.ProcExited.Code, Signal: rep.ProcExited.Signal}
		}
	}
}
