package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// zygote is a nested sandbox whose trusted harness, interpreter loaded and
// modules imported, forks one cell per run (see runtime/zygote.py). It is
// restarted when it dies. A zygote runs no untrusted code and is not
// counted against the budget; each of its cells is.
type zygote struct {
	spec jail.Spec
	mu   sync.Mutex // one fork command at a time on the zygote's channel
	sb   *jail.Sandbox
	uids *cellUIDs // nil rootless: cells share the zygote's uid
}

// cellSetupTimeout bounds how long a cell may take to get ready.
const cellSetupTimeout = 20 * time.Second

// newZygote prepares the zygote of a class whose sandboxes are cell (the
// class's spec: environment, binds, limits), with a host uid for each of
// up to cells cells at once (the fleet's budget bounds them); it starts at
// the first fork.
func newZygote(interpreter string, cell jail.Spec, cells int) *zygote {
	z := &zygote{spec: zygoteSpec(interpreter, cell)}
	if !jail.ProbeHost().Rootless {
		z.uids = newCellUIDs(cells)
		z.spec.CellUIDs = len(z.uids.used)
	}
	return z
}

// running returns the zygote sandbox, starting one if there is none alive.
func (z *zygote) running() (*jail.Sandbox, error) {
	if z.sb != nil {
		select {
		case <-z.sb.Done():
			_ = z.sb.Channel().Close()
			z.sb = nil
		default:
			return z.sb, nil
		}
	}
	spec := z.spec
	spec.ID = jail.NewID()
	if z.uids != nil {
		uid, err := z.uids.zygoteUID()
		if err != nil {
			return nil, err
		}
		spec.HostUID = uid
	}
	sb, err := jail.Start(context.Background(), spec)
	if err != nil {
		return nil, err
	}
	z.sb = sb
	return sb, nil
}

// close ends the zygote (cells already forked live on until they end).
func (z *zygote) close() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.sb != nil {
		z.sb.Kill(jail.LimitNone)
		z.sb.Wait()
		_ = z.sb.Channel().Close()
		z.sb = nil
	}
	if z.uids != nil {
		z.uids.close()
	}
}

// fork makes a cell and waits until it is restricted and waiting for code;
// its output goes to stdout and stderr.
func (z *zygote) fork(ctx context.Context, lim jail.Limits, warm bool, stdout, stderr io.Writer) (Box, error) {
	// The cell's own uid, held until the cell is gone: freed by its end
	// once attached (first in line, before the budget's slot), else here.
	inUID, putUID := 0, func() {}
	var hostUID int
	if z.uids != nil {
		i, err := z.uids.take()
		if err != nil {
			return nil, err
		}
		var once sync.Once
		inUID, hostUID, putUID = jail.CellUID(i), z.uids.host(i), func() { once.Do(func() { z.uids.put(i) }) }
	}
	cell, err := jail.NewCell(jail.NewID(), lim, stdout, stderr)
	if err != nil {
		putUID()
		return nil, err
	}
	cell.AfterDone(putUID)
	c := &cellBox{cell: cell, hostUID: hostUID}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		cell.Abandon()
		return nil, err
	}
	// Only our end goes through Go's poller (deadlines); the cell's stays
	// blocking, as its Python code expects. (A nonblocking descriptor makes
	// os.NewFile's file pollable, without net.FileConn's dup and probes.)
	_ = unix.SetNonblock(fds[0], true)
	c.conn = os.NewFile(uintptr(fds[0]), "cell")
	child := os.NewFile(uintptr(fds[1]), "cell-child")
	defer child.Close()
	fail := func(err error) (Box, error) {
		c.conn.Close()
		cell.Abandon()
		// Unattached, the cell never ran as its uid (it takes it after
		// SendGo); attached, Abandon waited for its end.
		putUID()
		return nil, fmt.Errorf("zygote cell: %w", err)
	}

	jail.PrimeAttach()
	z.mu.Lock()
	sb, err := z.running()
	if err == nil {
		out, errOut := cell.OutputFiles()
		err = runtime.SendFork(sb.Channel(), child, out, errOut, warm, inUID, jail.CellNproc(lim))
	}
	z.mu.Unlock()
	cell.ClosePassed()
	if err != nil {
		return fail(err)
	}
	_ = c.conn.SetDeadline(time.Now().Add(cellSetupTimeout))
	pidfd, err := runtime.ReadPidfd(c.conn)
	if err != nil {
		return fail(err)
	}
	if err := cell.Attach(context.Background(), pidfd); err != nil {
		return fail(err)
	}
	if err := runtime.SendGo(c.conn); err != nil {
		return fail(err)
	}
	if err := runtime.ReadReady(c.conn); err != nil {
		return fail(err)
	}
	_ = c.conn.SetDeadline(time.Time{})
	return c, nil
}

// cellBox is a zygote's cell as a [Box].
type cellBox struct {
	cell    *jail.Cell
	conn    *os.File // our end of the cell's socket, in the runtime's poller
	hostUID int      // the cell's own (0 rootless)
}

func (c *cellBox) ID() string                  { return c.cell.ID() }
func (c *cellBox) Channel() io.ReadWriteCloser { return c.conn }
func (c *cellBox) Kill(reason jail.Limit)      { c.cell.Kill(reason) }
func (c *cellBox) Wait() jail.Exit             { return c.cell.Wait() }
func (c *cellBox) Done() <-chan struct{}       { return c.cell.Done() }
func (c *cellBox) HostUID() int                { return c.hostUID }
func (c *cellBox) AfterDone(f func())          { c.cell.AfterDone(f) }
func (c *cellBox) CPUUsage() time.Duration     { return c.cell.CPUUsage() }
func (c *cellBox) MemoryUsage() int64          { return c.cell.MemoryUsage() }

func (c *cellBox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return c.cell.DialPort(ctx, port)
}

func (c *cellBox) Arm(ctx context.Context, timeout, cpu time.Duration) {
	c.cell.Arm(ctx, timeout, cpu)
}

// run is a cell's run: the exchange, and the cell's end read from it.
// The exchange runs in the caller's goroutine; should the cell end without
// an answer, its end sets a deadline on the socket, not a close, so that
// frames already buffered are still read.
func (c *cellBox) run(req runtime.Request, tools runtime.ToolHandler) (*runtime.Reply, jail.Exit) {
	conn := c.conn
	c.cell.AfterDone(func() { _ = conn.SetReadDeadline(time.Now().Add(time.Second)) })
	a := runtime.Exchange(conn, req, tools)
	var exit jail.Exit
	switch {
	case a.Reply != nil:
		// The harness has flushed the output and replied: the run is
		// over. The cell is killed and torn down without us.
		exit = c.cell.Finish()
	case a.Exited:
		// The code has ended; the cell's teardown goes on without us.
		exit = c.cell.Collect()
	default:
		exit = c.cell.Wait()
	}
	c.conn.Close()
	exit.ExitCode, exit.Signal = -1, int(unix.SIGKILL)
	switch {
	case a.Reply != nil:
		exit.ExitCode, exit.Signal = a.Reply.ExitCode, 0
	case a.Exited:
		exit.ExitCode, exit.Signal = a.Code, a.Signal
	}
	if exit.Limit == jail.LimitNone && exit.Signal == int(unix.SIGXCPU) {
		exit.Limit = jail.LimitCPU
	}
	return a.Reply, exit
}
