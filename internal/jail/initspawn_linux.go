package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The init of a machine (Spec.Machine): once the program runs, it starts
// processes beside it on the supervisor's orders, reaps every process
// of the namespace (those a command left behind are reparented here),
// reports the end of each it started, and ends, taking the namespace
// with it, when the program does.

// warmThreads makes the Go runtime start n threads now and keep them idle
// for later. A machine's processes may run as several uids (root inside,
// the users it adds), each with an RLIMIT_NPROC of its own, so together
// they can fill pids.max; an init that then needed a new thread would die
// (the runtime cannot go on without one), taking the machine with it. With
// threads made ahead, counted in pids.max (the supervisor sets it from the
// tasks there when the init settles), the init reuses them instead. Each
// goroutine holds a thread of its own while locked to it; unlocked, the
// threads wait in the runtime's idle list, which it never shrinks.
func warmThreads(n int) {
	var locked sync.WaitGroup
	release := make(chan struct{})
	var done sync.WaitGroup
	for range n {
		locked.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}

// spawnOrder asks the init to start a process; its stdin, stdout and
// stderr come with it (SCM_RIGHTS, in that order).
type spawnOrder struct {
	ID   uint64
	Argv []string
	Env  []string
	Dir  string
	// Terminal starts it on a terminal of this size of the sandbox's
	// devpts, whose master comes back with the answer.
	Terminal *WindowSize `json:",omitempty"`
	// Root runs it as root inside (initConfig.RootInside).
	Root bool `json:",omitempty"`
}

// signalOrder asks the init to signal a process it started, and its
// process group.
type signalOrder struct {
	ID     uint64
	Signal int
}

// supervisorOrder is one message of the supervisor to a machine's init.
type supervisorOrder struct {
	Spawn  *spawnOrder  `json:",omitempty"`
	Signal *signalOrder `json:",omitempty"`
	// Stats refreshes the machine's /proc (machineproc_linux.go).
	Stats *machineStats `json:",omitempty"`
}

// spawnedReport answers a spawn order: the process's pid inside, or why
// it could not start.
type spawnedReport struct {
	ID    uint64
	PID   int    `json:",omitempty"`
	Error string `json:",omitempty"`
	// Terminal: the terminal's master comes with this report.
	Terminal bool `json:",omitempty"`
}

// procExited reports how a started process ended.
type procExited struct {
	ID           uint64
	Code, Signal int
}

var (
	errSpawnFDs  = errors.New("the order came without its three descriptors")
	errSpawnArgv = errors.New("empty argv")
	errSpawnRoot = errors.New("this machine has no root inside")
)

// machineInit is the state of a machine's init.
//
// Lock order: mu, then encMu (the reaper sends after it lets go of mu;
// spawn sends holding neither).
type machineInit struct {
	cfg *initConfig
	ctl *os.File
	// enc is the control socket's writer, shared by the reaper and the
	// spawner.
	encMu sync.Mutex
	enc   *json.Encoder
	// mu guards byPID and byID; a fork and its entry happen under it,
	// so the reaper never sees a child before it is known.
	mu    sync.Mutex
	byPID map[int]uint64
	byID  map[uint64]int
	// sudoEnds are the processes sudo started (sudo_linux.go), by pid:
	// their end goes to the caller, not the supervisor.
	sudoEnds map[int]chan<- procExited
	// ownOOM is the init's own oom_score_adj, which it takes back after
	// each fork ("": unknown, and left alone).
	ownOOM string
}

// spawnRequest is an order with its descriptors.
type spawnRequest struct {
	order spawnOrder
	fds   []int
}

// serveMachine serves the supervisor's orders until the program ends, and
// returns how it ended. Forks happen on this goroutine's thread, the one
// Landlock restricted (Landlock is per thread; children inherit it).
func serveMachine(ctl *os.File, enc *json.Encoder, program int, cfg *initConfig) programExit {
	// Collections stay rare but possible: a long-lived machine's init
	// would otherwise grow with every order it decodes.
	debug.SetMemoryLimit(16 << 20)
	inheritLimits(cfg)
	m := &machineInit{cfg: cfg, ctl: ctl, enc: enc, byPID: map[int]uint64{}, byID: map[uint64]int{}, ownOOM: readOwnOOMScore()}
	spawns := make(chan spawnRequest)
	go m.readOrders(ctl, spawns)
	sudos := make(chan sudoFork)
	if cfg.sudo != nil {
		go m.serveSudo(cfg.sudo, sudos)
	}
	ended := make(chan programExit, 1)
	go m.reap(program, ended)
	for {
		select {
		case req := <-spawns:
			m.spawn(req)
		case f := <-sudos:
			m.forkSudo(f)
		case exit := <-ended:
			return exit
		}
	}
}

// inheritLimits puts the program's rlimits on the init itself, so that
// every process it forks has them from its first instruction; the task
// count (the init's threads are counted too) and the address space (the
// Go runtime's reservations) stay per process.
func inheritLimits(cfg *initConfig) {
	for _, r := range cfg.Rlimits {
		if r.Resource == unix.RLIMIT_NPROC || r.Resource == unix.RLIMIT_AS {
			continue
		}
		_ = unix.Prlimit(0, r.Resource, &unix.Rlimit{Cur: r.Cur, Max: r.Max}, nil)
	}
}

// readOrders decodes the supervisor's orders; spawns go to the forking
// thread, signals are sent here.
func (m *machineInit) readOrders(ctl *os.File, spawns chan<- spawnRequest) {
	rights := newRightsReader(ctl)
	dec := json.NewDecoder(rights)
	for {
		var o supervisorOrder
		if err := dec.Decode(&o); err != nil {
			return // the supervisor is gone: its SIGKILL follows
		}
		switch {
		case o.Spawn != nil:
			spawns <- spawnRequest{order: *o.Spawn, fds: rights.takeAll()}
		case o.Signal != nil:
			m.signal(*o.Signal)
		case o.Stats != nil:
			m.cfg.proc.render(*o.Stats)
		}
	}
}

// spawn starts one process, as the program was started but on the
// descriptors the order brought, and reports its pid.
func (m *machineInit) spawn(req spawnRequest) {
	defer func() {
		for _, fd := range req.fds {
			_ = unix.Close(fd)
		}
	}()
	o := req.order
	rep := spawnedReport{ID: o.ID}
	var term *terminal
	pid, err := m.fork(o, req.fds, &term, nil)
	if err != nil {
		rep.Error = err.Error()
	} else {
		rep.PID = pid
	}
	if term == nil || err != nil {
		term.close()
		m.send(initReport{Spawned: &rep})
		return
	}
	// The master goes to the supervisor; the init keeps no end of it.
	rep.Terminal = true
	m.encMu.Lock()
	_ = sendWithFD(m.ctl, initReport{Spawned: &rep}, term.master)
	m.encMu.Unlock()
	term.close()
}

// fork starts the order's process; with a terminal asked for, *term is
// the terminal it runs on. The end of one sudo started goes to ended, not
// to the supervisor.
func (m *machineInit) fork(o spawnOrder, fds []int, term **terminal, ended chan<- procExited) (int, error) {
	if len(fds) != 3 {
		return 0, errSpawnFDs
	}
	if len(o.Argv) == 0 {
		return 0, errSpawnArgv
	}
	attr := &syscall.ProcAttr{
		Dir:   o.Dir,
		Env:   o.Env,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		// Its own session and process group: a signal to the process
		// reaches what it started in its group, and what it detached
		// (setsid, a daemon) lives on, as on a machine.
		Sys: &syscall.SysProcAttr{Setsid: true},
	}
	if o.Root {
		if !m.cfg.RootInside {
			return 0, errSpawnRoot
		}
		attr.Sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
	}
	if o.Terminal != nil {
		if err := o.Terminal.Check(); err != nil {
			return 0, err
		}
		t, err := openTerminal(o.Terminal)
		if err != nil {
			return 0, err
		}
		*term = t
		slave := uintptr(t.slave)
		attr.Files = []uintptr{slave, slave, slave}
		attr.Sys.Setctty, attr.Sys.Ctty = true, 0 // the slave, as its fd 0
	}
	m.mu.Lock()
	pid, err := m.forkFirstChoice(o.Argv, attr)
	switch {
	case err != nil:
	case ended != nil:
		if m.sudoEnds == nil {
			m.sudoEnds = map[int]chan<- procExited{}
		}
		m.sudoEnds[pid] = ended
	default:
		m.byPID[pid], m.byID[o.ID] = o.ID, pid
	}
	m.mu.Unlock()
	if *term != nil {
		_ = unix.Close((*term).slave) // the process holds it now
		(*term).slave = -1
	}
	if err != nil {
		return 0, err
	}
	// The init's own rlimits came with the fork (inheritLimits); the
	// per-process count follows at once (the cgroup bounds tasks from the
	// fork on). A process that already ended needs none.
	if err := limitProcess(pid, m.cfg); err != nil && !errors.Is(err, unix.ESRCH) {
		return 0, err
	}
	return pid, nil // the OOM killer's first choice since its fork
}

// signal sends a signal to a process the init started and to its group.
func (m *machineInit) signal(o signalOrder) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pid, ok := m.byID[o.ID]
	if !ok || o.Signal <= 0 || o.Signal >= 65 {
		return
	}
	_ = unix.Kill(-pid, unix.Signal(o.Signal))
	_ = unix.Kill(pid, unix.Signal(o.Signal))
}

// reap reaps every process of the namespace; it reports the end of each
// the init started, and hands over the program's.
func (m *machineInit) reap(program int, ended chan<- programExit) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || got == program {
			ended <- programEnd(ws)
			return
		}
		m.mu.Lock()
		id, ok := m.byPID[got]
		delete(m.byPID, got)
		delete(m.byID, id)
		sudo := m.sudoEnds[got]
		delete(m.sudoEnds, got)
		m.mu.Unlock()
		rep := procExited{ID: id, Code: ws.ExitStatus()}
		if ws.Signaled() {
			rep.Code, rep.Signal = -1, int(ws.Signal())
		}
		switch {
		case sudo != nil:
			sudo <- rep // buffered: the caller may be gone
		case ok:
			m.send(initReport{ProcExited: &rep})
		}
		// else an orphan a command left behind
	}
}

func (m *machineInit) send(r initReport) {
	m.encMu.Lock()
	defer m.encMu.Unlock()
	_ = m.enc.Encode(r)
}

// programEnd is the program's exit, with the usage of every process reaped.
func programEnd(ws unix.WaitStatus) programExit {
	var all unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &all)
	exit := programExit{Code: ws.ExitStatus(), MaxRSSKiB: all.Maxrss, CPUNanos: all.Utime.Nano() + all.Stime.Nano()}
	if ws.Signaled() {
		exit.Code, exit.Signal = -1, int(ws.Signal())
	}
	return exit
}

// forkFirstChoice is syscall.ForkExec with the child the OOM killer's
// first choice from its first instruction: it inherits the score the init
// takes for the fork alone. Written to the child after its exec, a
// command that allocates at once could meet the OOM killer first, which
// would end the init's program (already at 1000) instead of it; so a
// fork the init cannot give that score is refused, not made.
func (m *machineInit) forkFirstChoice(argv []string, attr *syscall.ProcAttr) (int, error) {
	if m.ownOOM == "" {
		return 0, errors.New("the machine's init cannot read its own OOM score")
	}
	if err := ownOOMScore(oomFirst); err != nil {
		return 0, fmt.Errorf("the machine's init cannot make its child the OOM killer's first choice: %w", err)
	}
	pid, err := syscall.ForkExec(argv[0], argv, attr)
	if rerr := ownOOMScore(m.ownOOM); rerr != nil && err == nil {
		// The init at 1000 would be chosen with its children: end it
		// rather than run on so (the supervisor sees the machine end).
		panic(fmt.Sprintf("the machine's init cannot take back its OOM score: %v", rerr))
	}
	return pid, err
}

// oomFirst is the score of the init's children: the OOM killer's first
// choice. The init raises its own to it for each fork, which needs no
// privilege, and goes back to what it was, which needs none either (its
// floor, oom_score_adj_min, moves only for a privileged writer).
const oomFirst = "1000"

// oomScoreFD is the init's own oom_score_adj, opened for writing before
// the init made itself non-dumpable (guardInit): from then on its /proc
// files are root's, and the init, no owner of them any more, could not
// open it again.
var oomScoreFD = -1

// openOwnOOMScore opens the init's own oom_score_adj for later writes, on
// a descriptor above those the supervisor passes (which are numbered).
func openOwnOOMScore() error {
	fd, err := unix.Open("/proc/self/oom_score_adj", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open own oom_score_adj: %w", err)
	}
	defer unix.Close(fd)
	high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, oomScoreFDMin)
	if err != nil {
		return fmt.Errorf("own oom_score_adj: %w", err)
	}
	oomScoreFD = high
	return nil
}

// oomScoreFDMin is above every descriptor an init is handed.
const oomScoreFDMin = 512

// ownOOMScore sets the init's own oom_score_adj.
func ownOOMScore(v string) error {
	if oomScoreFD < 0 {
		return errors.New("its oom_score_adj is not open")
	}
	_, err := unix.Pwrite(oomScoreFD, []byte(v), 0)
	return err
}

// readOwnOOMScore is the init's own oom_score_adj ("" when unreadable).
func readOwnOOMScore() string {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
