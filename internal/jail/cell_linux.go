package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Cell is one cell of a nested sandbox (see Spec.Nested), seen from the
// supervisor: a cgroup of its own with the cell's limits, its output pipes,
// and the same enforcement a whole sandbox gets (timeout, CPU, output cap,
// cancellation). The nested program tells the supervisor which process is
// the cell by passing a pidfd of it.
type Cell struct {
	id       string
	limits   Limits
	cg       *cgroup
	start    time.Time
	output   *Output
	enforcer *Enforcer

	// outR are the read ends of the output pipes (non-blocking, out of
	// the runtime's poller); ep is an epoll instance watching them and,
	// once attached, the pidfd. ep itself is in the runtime's poller: one
	// goroutine (supervise) waits on it for output and for the end alike,
	// with one wakeup per event, and Finish interrupts it with a deadline.
	outR             [2]int
	ep               *os.File
	stdoutW, stderrW *os.File
	sinks            [2]io.Writer

	mu      sync.Mutex
	pidfd   *os.File // of the first process (blocking, watched through ep); nil before Attach
	nsInit  bool     // the first process is the init of its own pid namespace
	limit   Limit
	killed  bool
	retired bool // the cgroup is no longer the cell's: it may be another's
	// finished is what Finish reported, which is then the cell's Exit.
	finished *Exit
	ended    bool     // done is closed
	onDone   []func() // AfterDone's, run once done is closed

	attached chan struct{}
	drained  chan struct{} // both output pipes reached EOF
	done     chan struct{}
	exit     Exit
}

// NewCell prepares a cell: its cgroup and output pipes. stdout and stderr
// receive the cell's output (capped at lim.OutputBytes).
func NewCell(id string, lim Limits, stdout, stderr io.Writer) (*Cell, error) {
	host := ProbeHost()
	if host.Cgroup.version == 0 {
		return nil, fmt.Errorf("%w: cells need cgroups (%s)", ErrUnsupported, host.Cgroup.reason)
	}
	if !validID(id) {
		return nil, fmt.Errorf("jail: bad cell id %q", id)
	}
	lim = lim.WithDefaults()
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	c := &Cell{id: id, limits: lim, sinks: [2]io.Writer{stdout, stderr},
		attached: make(chan struct{}), drained: make(chan struct{}), done: make(chan struct{})}
	var err error
	if c.cg, err = cellCgroup(host.Cgroup, lim); err != nil {
		return nil, err
	}
	c.outR = [2]int{-1, -1}
	if err := c.openIO(); err != nil {
		c.closeIO()
		retireCellCgroup(c.cg)
		return nil, err
	}
	c.output = NewOutput(lim.OutputBytes, func() { c.Kill(LimitOutput) })
	c.enforcer = NewEnforcer(c.Kill, c.cg.cpuUsage, c.output)
	// A ready cell only idles (its per-process RLIMIT_CPU holds too); the
	// CPU budget is checked often once a run armed the cell.
	c.enforcer.SetIdleTick(time.Second)
	return c, nil
}

// openIO makes the output pipes and the epoll instance that watches their
// read ends. The read ends are non-blocking (supervise reads what they
// hold); the write ends, passed to the nested program, are blocking and
// out of the runtime's poller.
func (c *Cell) openIO() error {
	for i, w := range []**os.File{&c.stdoutW, &c.stderrW} {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			return err
		}
		c.outR[i] = p[0]
		// Blocking before os.NewFile, which then leaves it out of the poller.
		if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETFL, 0); err != nil {
			unix.Close(p[1])
			return err
		}
		*w = os.NewFile(uintptr(p[1]), "|1")
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	for _, fd := range c.outR {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			unix.Close(ep)
			return err
		}
	}
	// Non-blocking, the epoll descriptor goes into the runtime's poller
	// (its only status flag: no F_GETFL needed).
	if _, err := unix.FcntlInt(uintptr(ep), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(ep)
		return err
	}
	c.ep = os.NewFile(uintptr(ep), "cell-epoll")
	return nil
}

// closeIO closes the read ends and the epoll instance (what is open).
func (c *Cell) closeIO() {
	for i, fd := range c.outR {
		if fd >= 0 {
			unix.Close(fd)
			c.outR[i] = -1
		}
	}
	closeAll(c.ep, c.stdoutW, c.stderrW)
}

// OutputFiles are the write ends of the cell's stdout and stderr, to pass
// to the nested program; close them once passed ([Cell.ClosePassed]).
func (c *Cell) OutputFiles() (stdout, stderr *os.File) { return c.stdoutW, c.stderrW }

// ClosePassed closes the supervisor's copies of the write ends, so the
// output readers see EOF when the cell ends.
func (c *Cell) ClosePassed() { closeAll(c.stdoutW, c.stderrW) }

// ID names the cell.
func (c *Cell) ID() string { return c.id }

// Attach takes the pidfd of the cell's first process, moves that process
// into the cell's cgroup (its children are born there) and starts
// enforcing the cell's limits. Until the nested program hears back, the
// process must not start anything.
func (c *Cell) Attach(ctx context.Context, pidfd int) error {
	pid, err := pidOfPidfd(pidfd)
	if err != nil {
		unix.Close(pidfd)
		return err
	}
	lastMove.Store(time.Now().UnixNano())
	if err := c.cg.addProcess(pid); err != nil {
		unix.Close(pidfd)
		return err
	}
	if err := c.cg.settlePids(c.limits.MaxProcesses); err != nil {
		unix.Close(pidfd)
		return err
	}
	nsInit := pidnsInit(pidfd, pid)
	// The pidfd is readable once the process has ended: supervise learns
	// it through ep. The os.File keeps a Kill that comes after its Close
	// from signalling whatever the number refers to by then.
	if err := unix.EpollCtl(int(c.epFD()), unix.EPOLL_CTL_ADD, pidfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(pidfd)}); err != nil {
		unix.Close(pidfd)
		return err
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	c.mu.Lock()
	c.pidfd, c.nsInit = f, nsInit
	killed := c.killed
	c.mu.Unlock()
	if killed {
		signalPidfd(f)
	}
	c.start = time.Now()
	// Started here, not in supervise: an Arm may come as soon as attached
	// is closed.
	c.enforcer.Start(ctx, c.limits.Timeout, c.limits.CPUTime)
	go c.supervise()
	close(c.attached)
	return nil
}

// pidnsInit reports whether the process of pidfd (pid here) is the init
// of a pid namespace of its own. Its end then ends every other process of
// the namespace: the kernel kills them, and they are all reaped before
// the init's own end shows. A zygote's cell is such an init.
func pidnsInit(pidfd, pid int) bool {
	const pidfdGetPidNamespace = 0xff05 // _IO(PIDFS_IOCTL_MAGIC, 5), Linux 6.11
	ns, err := unix.IoctlRetInt(pidfd, pidfdGetPidNamespace)
	if err != nil {
		return false
	}
	defer unix.Close(ns)
	inner, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(ns), unix.NS_GET_TGID_IN_PIDNS, uintptr(pid))
	return errno == 0 && inner == 1
}

// signalPidfd sends SIGKILL through a pidfd, unless it is closed.
func signalPidfd(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0)
		})
	}
}

// priming is set while a PrimeAttach is under way.
var priming atomic.Bool

// lastMove is when a process was last moved between cgroups here (Unix
// nanoseconds): by an Attach or a PrimeAttach.
var lastMove atomic.Int64

// primeQuiet is how long after a move the kernel's lock is taken to be
// still warm (an RCU grace period is a few milliseconds).
const primeQuiet = 10 * time.Millisecond

// PrimeAttach readies the kernel for the next Attach, to be called while
// the nested program forks a cell (it returns at once; the write, when
// there is one, is made in a goroutine of its own). A cell's first
// process is moved into its cgroup under a global lock whose first writer
// after a quiet moment waits for an RCU grace period (6-15 ms measured on
// cgroup v1 in a VM; later writers pass at once). Moving this process into
// the cgroup it is already in takes that lock and changes nothing, so the
// wait overlaps the fork instead of following it.
//
// Under load the lock is never quiet: a move in the last primeQuiet makes
// the write a cost with nothing to gain, and it is skipped (decided here,
// before a goroutine is started for nothing).
func PrimeAttach() {
	host := ProbeHost()
	if host.Cgroup.version != 1 || time.Now().UnixNano()-lastMove.Load() < int64(primeQuiet) || !priming.CompareAndSwap(false, true) {
		return
	}
	go primeAttach(host)
}

func primeAttach(host Host) {
	defer priming.Store(false)
	lastMove.Store(time.Now().UnixNano())
	primeOnce.Do(func() {
		own := filepath.Join(filepath.Dir(host.Cgroup.parents["pids"]), "cgroup.procs")
		if fd, err := unix.Open(own, unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			primeFD, primePid = fd, []byte(strconv.Itoa(os.Getpid()))
		}
	})
	if primeFD >= 0 {
		_, _ = unix.Write(primeFD, primePid)
	}
}

// The cgroup.procs file PrimeAttach writes to, opened once, and what it
// writes.
var (
	primeOnce sync.Once
	primeFD   = -1
	primePid  []byte
)

// pidOfPidfd reads the pid (in our pid namespace) a pidfd refers to: from
// the kernel's PIDFD_GET_INFO (Linux 6.13), else from the pidfd's fdinfo.
func pidOfPidfd(fd int) (int, error) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
	switch err := unix.IoctlPidfdInfo(fd, &info); {
	case err == nil && info.Mask&unix.PIDFD_INFO_PID != 0 && info.Pid > 0:
		return int(info.Pid), nil
	case err == unix.ESRCH:
		return 0, fmt.Errorf("jail: pidfd of an ended process")
	}
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || pid <= 0 {
				return 0, fmt.Errorf("jail: pidfd of an ended process")
			}
			return pid, nil
		}
	}
	return 0, errors.New("jail: not a pidfd")
}

// epFD is the epoll instance's descriptor (valid while the cell lives:
// only supervise and Abandon close it).
func (c *Cell) epFD() uintptr {
	fd := ^uintptr(0)
	if rc, err := c.ep.SyscallConn(); err == nil {
		_ = rc.Control(func(d uintptr) { fd = d })
	}
	return fd
}

// supervise copies the cell's output and waits for its first process to
// end (the enforcer, started by Attach, acts meanwhile through its
// timers), all in this one goroutine, then tears the cell down.
func (c *Cell) supervise() {
	buf := copyBufs.Get().(*[32 << 10]byte)
	defer copyBufs.Put(buf)
	p := &cellPump{c: c, buf: buf, ep: int(c.epFD()), pidfd: -1, open: [2]bool{true, true}}
	if rc, err := c.pidfd.SyscallConn(); err == nil {
		_ = rc.Control(func(d uintptr) { p.pidfd = int(d) })
	}
	p.run()
	c.retire()
}

// retire records the cell's exit and tears it down, once its output is
// drained and its first process has ended.
func (c *Cell) retire() {
	c.mu.Lock()
	finished := c.finished
	c.mu.Unlock()
	if finished != nil {
		c.exit = *finished
	} else {
		c.exit = c.snapshot()
	}
	// Under the lock: a Kill from now on must not use the cgroup, which
	// the next cell may get (nor the closed pidfd).
	c.mu.Lock()
	_ = c.pidfd.Close()
	c.retired = true
	c.mu.Unlock()
	// Before done: whoever waits for the cell finds its cgroup retired
	// (ReleaseCellCgroups sees it).
	retireCellCgroup(c.cg)
	c.closeIO()
	c.end()
}

// waitPidfd blocks until the process of pidfd has ended.
func waitPidfd(pidfd int) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}

// ended1 is the end of the cell's first process: the limits no longer
// need enforcing, and anything still in the cgroup is killed, unless that
// process was the init of its pid namespace: then the kernel has killed
// and reaped everything else already.
func (c *Cell) ended1() {
	c.enforcer.Stop()
	if !c.nsInit {
		_ = c.cg.kill(false)
	}
}

// end closes done and runs what AfterDone was given.
func (c *Cell) end() {
	c.mu.Lock()
	c.ended = true
	close(c.done)
	fs := c.onDone
	c.onDone = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// AfterDone runs f once the cell has ended and is torn down: in the
// goroutine that tore it down, or at once if it already is. It is how a
// caller waits for the end without a goroutine of its own parked on Done.
func (c *Cell) AfterDone(f func()) {
	c.mu.Lock()
	if !c.ended {
		c.onDone = append(c.onDone, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	f()
}

// snapshot is what the supervisor knows of the cell's run so far; once
// the cgroup is retired, what it knew then.
func (c *Cell) snapshot() Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return c.exit
	}
	e := Exit{Limit: c.limit, Duration: time.Since(c.start), Truncated: c.output.Truncated()}
	e.PeakMemoryBytes, e.CPUTime = c.cg.memoryPeak(), c.cg.cpuUsage()
	e.OOMKilled = c.cg.oomKills() > 0
	if e.Limit == LimitNone && e.OOMKilled {
		e.Limit = LimitMemory
	}
	return e
}

// Collect returns the run's Exit as soon as the code has ended, without
// waiting for the cell's namespaces to be torn down (tens of milliseconds
// of the kernel's time): the caller knows the code ended (its nested
// program said so) and the cell's output is drained here.
func (c *Cell) Collect() Exit {
	select {
	case <-c.drained:
		return c.snapshot()
	case <-c.done:
		return c.exit
	}
}

// Finish ends a cell whose program has said its last word (its reply
// came, after its output was flushed): the output is what the pipes hold
// now, and the cell is killed without waiting for the kernel to tear it
// down (the exit of a large interpreter alone takes milliseconds). A
// process of the code that is still writing loses what it writes later.
func (c *Cell) Finish() Exit {
	select {
	case <-c.attached:
	case <-c.done:
		return c.exit
	}
	_ = c.ep.SetReadDeadline(time.Now()) // supervise drains the pipes
	<-c.drained
	e := c.snapshot()
	c.mu.Lock()
	c.finished = &e // the cell's end need not read its cgroup again
	c.mu.Unlock()
	// The run is over and the cell killed now: nothing is left to enforce,
	// and the caller's context, which ends soon, must not wake a callback.
	c.enforcer.Stop()
	c.Kill(LimitNone) // a limit found meanwhile is already in e
	return e
}

// Arm gives the cell's work its limits, counted from now, and a fresh
// output budget.
func (c *Cell) Arm(ctx context.Context, timeout, cpu time.Duration) {
	select {
	case <-c.attached:
	case <-c.done:
		return
	}
	c.enforcer.Arm(ctx, timeout, cpu)
}

// Kill ends the cell at once; the first reason given is the one reported.
func (c *Cell) Kill(reason Limit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed {
		return
	}
	c.killed = true
	c.limit = reason
	if c.pidfd != nil {
		signalPidfd(c.pidfd)
	}
	// The end of a pid namespace's init is the end of the namespace.
	if !c.retired && (c.pidfd == nil || !c.nsInit) {
		_ = c.cg.kill(false)
	}
}

// Abandon releases a cell that never attached (its program did not start).
func (c *Cell) Abandon() {
	select {
	case <-c.attached:
		c.Kill(LimitNone)
		<-c.done
		return
	default:
	}
	c.closeIO()
	c.mu.Lock()
	retired := c.retired
	c.retired = true
	c.mu.Unlock()
	if !retired {
		retireCellCgroup(c.cg)
	}
}

// Done is closed when the cell has ended and is torn down.
func (c *Cell) Done() <-chan struct{} { return c.done }

// Wait blocks until the cell ends and returns what the supervisor saw: the
// limit that ended it, OOM, truncation and resources. Exit status and
// signal come from the nested program, which reaped the cell.
func (c *Cell) Wait() Exit {
	<-c.done
	return c.exit
}
