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

	stdoutR, stderrR *os.File
	stdoutW, stderrW *os.File
	sinks            [2]io.Writer

	mu      sync.Mutex
	pidfd   int
	limit   Limit
	killed  bool
	retired bool // the cgroup is no longer the cell's: it may be another's

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
	c := &Cell{id: id, limits: lim, pidfd: -1, sinks: [2]io.Writer{stdout, stderr},
		attached: make(chan struct{}), drained: make(chan struct{}), done: make(chan struct{})}
	var err error
	if c.cg, err = cellCgroup(host.Cgroup, lim); err != nil {
		return nil, err
	}
	if c.stdoutR, c.stdoutW, err = os.Pipe(); err != nil {
		retireCellCgroup(c.cg)
		return nil, err
	}
	if c.stderrR, c.stderrW, err = os.Pipe(); err != nil {
		closeAll(c.stdoutR, c.stdoutW)
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
	if err := c.cg.addProcess(pid); err != nil {
		unix.Close(pidfd)
		return err
	}
	if err := c.cg.settlePids(c.limits.MaxProcesses); err != nil {
		unix.Close(pidfd)
		return err
	}
	c.mu.Lock()
	c.pidfd = pidfd
	killed := c.killed
	c.mu.Unlock()
	if killed {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	}
	c.start = time.Now()
	go c.supervise(ctx)
	close(c.attached)
	return nil
}

// priming is set while a PrimeAttach is under way.
var priming atomic.Bool

// PrimeAttach readies the kernel for the next Attach, to be called
// (asynchronously) while the nested program forks a cell: a cell's first
// process is moved into its cgroup under a global lock whose first writer
// after a quiet moment waits for an RCU grace period (6-15 ms measured on
// cgroup v1 in a VM; later writers pass at once). Moving this process into
// the cgroup it is already in takes that lock and changes nothing, so the
// wait overlaps the fork instead of following it.
func PrimeAttach() {
	host := ProbeHost()
	if host.Cgroup.version != 1 || !priming.CompareAndSwap(false, true) {
		return
	}
	defer priming.Store(false)
	own := filepath.Dir(host.Cgroup.parents["pids"])
	_ = os.WriteFile(filepath.Join(own, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
}

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

func (c *Cell) supervise(ctx context.Context) {
	var copiers sync.WaitGroup
	copiers.Add(2)
	go c.output.Copy(&copiers, 0, c.stdoutR, c.sinks[0])
	go c.output.Copy(&copiers, 1, c.stderrR, c.sinks[1])
	go func() {
		copiers.Wait()
		close(c.drained)
	}()
	exited := make(chan struct{})
	go c.waitExit(exited)
	c.enforcer.Run(ctx, c.limits.Timeout, c.limits.CPUTime, exited)
	// The first process is gone; so is its pid namespace, whose init it
	// parented with PDEATHSIG. Anything still in the cgroup is killed.
	_ = c.cg.kill(false)
	<-c.drained
	c.exit = c.snapshot()
	// Under the lock: a Kill from now on must not signal whatever process
	// a reused descriptor number refers to, nor kill in the cgroup, which
	// the next cell may get.
	c.mu.Lock()
	unix.Close(c.pidfd)
	c.pidfd = -1
	c.retired = true
	c.mu.Unlock()
	// Before done: whoever waits for the cell finds its cgroup retired
	// (ReleaseCellCgroups sees it).
	retireCellCgroup(c.cg)
	closeAll(c.stdoutR, c.stderrR)
	close(c.done)
}

// waitExit closes exited when the cell's first process has ended. The
// pidfd waits in the runtime's poller (it is readable once the process
// exits), not on a thread of its own per cell; a blocking poll is the
// fallback.
func (c *Cell) waitExit(exited chan<- struct{}) {
	defer close(exited)
	if fd, err := unix.Dup(c.pidfd); err == nil {
		unix.CloseOnExec(fd)
		if unix.SetNonblock(fd, true) == nil {
			f := os.NewFile(uintptr(fd), "pidfd")
			defer f.Close()
			if rc, err := f.SyscallConn(); err == nil {
				err = rc.Read(func(fd uintptr) bool {
					p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
					n, err := unix.Poll(p, 0)
					return err == nil && n > 0
				})
				if err == nil {
					return
				}
			}
		} else {
			unix.Close(fd)
		}
	}
	fds := []unix.PollFd{{Fd: int32(c.pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
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
	now := time.Now()
	_ = c.stdoutR.SetReadDeadline(now)
	_ = c.stderrR.SetReadDeadline(now)
	<-c.drained
	e := c.snapshot()
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
	if c.pidfd >= 0 {
		// Under the lock, so that supervise cannot close it meanwhile.
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
	}
	if !c.retired {
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
	closeAll(c.stdoutR, c.stderrR, c.stdoutW, c.stderrW)
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
