package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
	"golang.org/x/sys/unix"
)

// zygote is a nested sandbox whose trusted harness, interpreter loaded and
// modules imported, forks one cell per run (see runtime/zygote.py). It is
// restarted when it dies.
type zygote struct {
	spec jail.Spec
	mu   sync.Mutex // one fork command at a time on the zygote's channel
	sb   *jail.Sandbox
}

// cellSetupTimeout bounds how long a cell may take to get ready.
const cellSetupTimeout = 20 * time.Second

func newZygote(interpreter string, env, binds []string, layer []jail.Bind, cell jail.Limits) *zygote {
	lim := cell
	lim.Timeout = 365 * 24 * time.Hour // lives as long as the service
	lim.CPUTime = 365 * 24 * time.Hour
	lim.MemoryBytes = max(cell.MemoryBytes, 256<<20) // the zygote alone; cells have their own cgroups
	lim.MaxProcesses = 256                           // cells in their first instant, before they move out
	return &zygote{spec: jail.Spec{
		Argv:             runtime.ZygoteArgv(interpreter),
		Env:              runtime.ZygoteEnv(env),
		ReadOnlyBinds:    binds,
		Binds:            layer,
		Limits:           lim,
		Nested:           true,
		SeqPacketChannel: true,
	}}
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
}

// fork makes a cell and waits until it is restricted and waiting for code.
func (z *zygote) fork(ctx context.Context, lim jail.Limits, warm bool) (pooled, error) {
	w := &warmCell{stdout: &switchWriter{}, stderr: &switchWriter{}}
	cell, err := jail.NewCell(jail.NewID(), lim, w.stdout, w.stderr)
	if err != nil {
		return nil, err
	}
	w.cell = cell
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		cell.Abandon()
		return nil, err
	}
	// Only our end goes through Go's poller (deadlines); the cell's stays
	// blocking, as its Python code expects.
	_ = unix.SetNonblock(fds[0], true)
	parent, child := os.NewFile(uintptr(fds[0]), "cell"), os.NewFile(uintptr(fds[1]), "cell-child")
	defer child.Close()
	conn, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		cell.Abandon()
		return nil, err
	}
	w.conn = conn.(*net.UnixConn)
	fail := func(err error) (pooled, error) {
		w.conn.Close()
		cell.Abandon()
		return nil, fmt.Errorf("zygote cell: %w", err)
	}

	go jail.PrimeAttach()
	z.mu.Lock()
	sb, err := z.running()
	if err == nil {
		stdout, stderr := cell.OutputFiles()
		err = runtime.SendFork(sb.Channel(), child, stdout, stderr, warm)
	}
	z.mu.Unlock()
	cell.ClosePassed()
	if err != nil {
		return fail(err)
	}
	_ = w.conn.SetDeadline(time.Now().Add(cellSetupTimeout))
	pidfd, err := runtime.ReadPidfd(w.conn)
	if err != nil {
		return fail(err)
	}
	if err := cell.Attach(context.Background(), pidfd); err != nil {
		return fail(err)
	}
	if err := runtime.SendGo(w.conn); err != nil {
		return fail(err)
	}
	if err := runtime.ReadReady(w.conn); err != nil {
		return fail(err)
	}
	_ = w.conn.SetDeadline(time.Time{})
	return w, nil
}

// warmCell is a zygote's cell, restricted and waiting for its request.
type warmCell struct {
	cell           *jail.Cell
	conn           *net.UnixConn
	stdout, stderr *switchWriter
}

func (w *warmCell) id() string { return w.cell.ID() }

func (w *warmCell) release() {}

func (w *warmCell) sandbox() box { return nil }

func (w *warmCell) setOutput(stdout, stderr io.Writer) {
	w.stdout.set(stdout)
	w.stderr.set(stderr)
}

func (w *warmCell) arm(ctx context.Context, timeout, cpu time.Duration) {
	w.cell.Arm(ctx, timeout, cpu)
}

func (w *warmCell) alive() bool {
	select {
	case <-w.cell.Done():
		return false
	default:
		return true
	}
}

func (w *warmCell) destroy() {
	w.cell.Kill(jail.LimitNone)
	w.cell.Wait()
	w.conn.Close()
}

func (w *warmCell) run(req runtime.Request, tools toolHandler) (*runtime.Reply, jail.Exit) {
	type result struct {
		rep          *runtime.Reply
		code, signal int
		exited       bool
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if err := runtime.WriteRequest(w.conn, req); err == nil {
			r.rep, r.code, r.signal, r.exited = readCellRun(w.conn, tools)
		}
		done <- r
	}()
	var r result
	var exit jail.Exit
	select {
	case r = <-done:
		switch {
		case r.rep != nil:
			// The harness has flushed the output and replied: the run is
			// over. The cell is killed and torn down without us.
			exit = w.cell.Finish()
			r.code, r.signal, r.exited = r.rep.ExitCode, 0, true
		case r.exited:
			// The code has ended; the cell's teardown goes on without us.
			exit = w.cell.Collect()
		default:
			exit = w.cell.Wait()
		}
	case <-w.cell.Done():
		// The cell is gone: its frames are in the socket or never will be.
		// A deadline, not a close, so that buffered frames are still read.
		_ = w.conn.SetReadDeadline(time.Now().Add(time.Second))
		r = <-done
		exit = w.cell.Wait()
		if r.rep != nil {
			r.code, r.signal, r.exited = r.rep.ExitCode, 0, true
		}
	}
	w.conn.Close()
	exit.ExitCode, exit.Signal = -1, int(unix.SIGKILL)
	if r.exited {
		exit.ExitCode, exit.Signal = r.code, r.signal
	}
	if exit.Limit == jail.LimitNone && exit.Signal == int(unix.SIGXCPU) {
		exit.Limit = jail.LimitCPU
	}
	return r.rep, exit
}

// readCellRun reads what a cell sends after its request, up to the first
// of: the reply (after which the harness only exits; see
// [jail.Cell.Finish]), or the exit frame of the cell's init when the code
// ended without a reply (code and signal). exited is false when neither
// came (the cell was killed whole).
func readCellRun(rw io.ReadWriter, tools toolHandler) (rep *runtime.Reply, code, signal int, exited bool) {
	for {
		rep, code, signal, exited = readCellFrame(rw)
		if rep == nil || rep.ToolCall == nil {
			return rep, code, signal, exited
		}
		if answerToolCall(rw, rep.ToolCall, tools) != nil {
			return nil, 0, 0, false
		}
	}
}

// readCellFrame reads one frame of a cell: a reply (or tool call), or the
// exit frame of its init.
func readCellFrame(r io.Reader) (rep *runtime.Reply, code, signal int, exited bool) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, 0, 0, false
	}
	n := binary.BigEndian.Uint32(head[:])
	if int64(n) > int64(runtime.MaxReplyBytes) {
		return nil, 0, 0, false
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, 0, 0, false
	}
	var m struct {
		CellExit *struct {
			Exit   int `json:"exit"`
			Signal int `json:"signal"`
		} `json:"cell_exit"`
	}
	if json.Unmarshal(body, &m) == nil && m.CellExit != nil {
		return nil, m.CellExit.Exit, m.CellExit.Signal, true
	}
	var rp runtime.Reply
	if err := json.Unmarshal(body, &rp); err != nil {
		return nil, 0, 0, false
	}
	return &rp, 0, 0, false
}
