package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/codecage/codecage/internal/service"
)

// proc is a command this surface started in a sandbox: its events, kept
// so that the stream that started it and any that connect later see it.
type proc struct {
	pid    uint32
	config processConfig
	tag    *string
	cancel context.CancelFunc

	mu     sync.Mutex
	events []event // data events, then the end
	ended  bool
	// gone: it ended with its sandbox (killed, or at its end of life): no
	// end event, the streams that follow it break instead.
	gone bool
	wake chan struct{} // closed and replaced when events grow

	// started is closed when the command runs, or, with refused set, when
	// the service refused it (it never ran: no events).
	started   chan struct{}
	startOnce sync.Once
	refused   error

	// input is the command's stdin or terminal (started with stdin or a
	// pty), under mu; nil otherwise.
	input *service.CommandInput
}

// inputOf is p's input, or the error E2B's clients get without one.
func (p *proc) inputOf() (*service.CommandInput, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.ended:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d has ended", p.pid))
	case p.input == nil:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d was started without stdin: start it with stdin: true (commands.run(cmd, {stdin: true})) or as a pty", p.pid))
	}
	return p.input, nil
}

func (p *proc) markStarted(refused error) {
	p.startOnce.Do(func() {
		p.refused = refused
		close(p.started)
	})
}

func (p *proc) add(ev event, end bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, ev)
	p.ended = p.ended || end
	close(p.wake)
	p.wake = make(chan struct{})
}

// goneWithSandbox ends p without an end event: it went with its sandbox,
// and its followers break their streams.
func (p *proc) goneWithSandbox() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone, p.ended = true, true
	close(p.wake)
	p.wake = make(chan struct{})
}

// follow sends p's events from the from'th on until its end, or until ctx
// ends (the client went away: the process goes on, as in E2B). It sends a
// keepalive event when the process is quiet for keepalive.
func (p *proc) follow(ctx context.Context, from int, keepalive time.Duration, send func(event) error) error {
	t := time.NewTimer(keepalive)
	defer t.Stop()
	for {
		p.mu.Lock()
		batch, wake, ended := p.events[from:], p.wake, p.ended
		p.mu.Unlock()
		for _, ev := range batch {
			if err := send(ev); err != nil {
				return err
			}
		}
		from += len(batch)
		if ended && len(batch) == 0 {
			p.mu.Lock()
			gone := p.gone
			p.mu.Unlock()
			if gone {
				return errSandboxGone
			}
			return nil
		}
		if len(batch) > 0 {
			continue // the end may be in a later batch
		}
		t.Reset(keepalive)
		select {
		case <-wake:
		case <-t.C:
			if err := send(event{Keepalive: &empty{}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// start runs a command in the sandbox: a start event at once, its output
// while it runs, its end.
func (s *Server) start(ctx context.Context, req *connect.Request[startRequest], stream *connect.ServerStream[processEvent]) error {
	ref := sandboxOf(ctx)
	m := req.Msg
	if m.Process.Cmd == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	creq := service.CommandRequest{SessionID: ref.id, Owner: ref.owner, Argv: append([]string{m.Process.Cmd}, m.Process.Args...), Env: m.Process.Envs}
	creq.Stdin = m.Stdin != nil && *m.Stdin
	if len(m.PTY) > 0 && string(m.PTY) != "null" {
		var pty ptyConfig
		if err := json.Unmarshal(m.PTY, &pty); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty: %v", err))
		}
		creq.Terminal = &service.TerminalSize{Cols: int(min(pty.Size.Cols, 1<<20)), Rows: int(min(pty.Size.Rows, 1<<20))}
	}
	if m.Process.Cwd != nil && *m.Process.Cwd != "" {
		cwd := *m.Process.Cwd
		if strings.HasPrefix(cwd, "~") {
			cwd = Home + strings.TrimPrefix(cwd, "~")
		}
		if !strings.HasPrefix(cwd, "/") || cwd == Home || strings.HasPrefix(cwd, Home+"/") {
			creq.WorkingDir = cwd
		} else {
			// Elsewhere in the sandbox (/tmp): entered by a shell of its
			// own, since the service's working directories are the
			// workspace's.
			creq.Argv = append([]string{"/bin/sh", "-c", `cd -- "$1" || exit 2; shift; exec "$@"`, "sh", path.Clean(cwd)}, creq.Argv...)
		}
	}
	// E2B's timeout (Connect-Timeout-Ms) is the process's, not the
	// stream's: a client that goes away leaves it running until then.
	limit := s.svc.Config().MaxCommandTime
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl))
	}
	creq.Timeout = max(limit, time.Second)

	x := s.boxes.get(ref.id)
	x.mu.Lock()
	x.nextPID++
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &proc{pid: x.nextPID, config: m.Process, tag: m.Tag, cancel: cancel, wake: make(chan struct{}), started: make(chan struct{})}
	x.procs[p.pid] = p
	x.mu.Unlock()

	go s.run(runCtx, x, p, creq)
	// The start event once it runs: a request the service refuses (rate
	// limit, budget, a gone sandbox) is an error of the call instead.
	<-p.started
	if p.refused != nil {
		return rpcError(p.refused)
	}
	if err := stream.Send(&processEvent{Event: event{Start: &startEvent{PID: p.pid}}}); err != nil {
		return err
	}
	return breakIfGone(p.follow(ctx, 0, keepaliveOf(req.Header()), func(ev event) error { return stream.Send(&processEvent{Event: ev}) }))
}

// run runs p to its end and records what it did.
func (s *Server) run(ctx context.Context, x *box, p *proc, creq service.CommandRequest) {
	defer func() {
		p.cancel()
		// Kept a while for a late Connect or wait; then forgotten.
		time.AfterFunc(time.Minute, func() {
			x.mu.Lock()
			delete(x.procs, p.pid)
			x.mu.Unlock()
		})
	}()
	var streamed [2]int
	creq.OnInput = func(in *service.CommandInput) {
		p.mu.Lock()
		p.input = in
		p.mu.Unlock()
	}
	terminal := creq.Terminal != nil
	creq.OnOutput = func(stream, line string) {
		if terminal {
			// A terminal has one stream, E2B's pty.
			streamed[0] += len(line)
			p.add(event{Data: &dataEvent{PTY: []byte(line)}}, false)
			return
		}
		if stream == "stderr" {
			streamed[1] += len(line)
			p.add(event{Data: &dataEvent{Stderr: []byte(line)}}, false)
			return
		}
		streamed[0] += len(line)
		p.add(event{Data: &dataEvent{Stdout: []byte(line)}}, false)
	}
	creq.OnStart = func() { p.markStarted(nil) }
	res, err := s.svc.RunCommand(ctx, creq)
	if err != nil {
		x.mu.Lock()
		delete(x.procs, p.pid)
		x.mu.Unlock()
		p.markStarted(err)
		p.add(event{}, true) // ends followers; the call reports err
		return
	}
	p.markStarted(nil)
	if res.Limit != nil && *res.Limit == service.LimitCanceled && s.sandboxGone(ctx, sandboxRef{id: creq.SessionID, owner: creq.Owner}) {
		p.goneWithSandbox()
		return
	}
	// What the streams held back: a last line without its newline.
	if len(res.Stdout) > streamed[0] {
		if terminal {
			p.add(event{Data: &dataEvent{PTY: []byte(res.Stdout[streamed[0]:])}}, false)
		} else {
			p.add(event{Data: &dataEvent{Stdout: []byte(res.Stdout[streamed[0]:])}}, false)
		}
	}
	if len(res.Stderr) > streamed[1] {
		p.add(event{Data: &dataEvent{Stderr: []byte(res.Stderr[streamed[1]:])}}, false)
	}
	p.add(event{End: endOf(res)}, true)
}

func endOf(res *service.CommandResult) *endEvent {
	if res.Limit != nil {
		msg := "signal: killed"
		if res.Error != nil {
			msg += " (" + *res.Error + ")"
		}
		return &endEvent{ExitCode: -1, Exited: false, Status: "signal: killed", Error: &msg}
	}
	status := "exit status " + strconv.Itoa(res.ExitCode)
	end := &endEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: status}
	if res.ExitCode != 0 {
		msg := status
		if res.Error != nil && strings.Contains(*res.Error, "not allowed") {
			msg = *res.Error
		}
		end.Error = &msg
	}
	return end
}

// keepaliveOf is the interval the client asked for (seconds), or 50 s.
func keepaliveOf(h interface{ Get(string) string }) time.Duration {
	if n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 50 * time.Second
}

// find returns the process a selector names.
func (x *box) find(sel selector) (*proc, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range x.procs {
		if sel.PID != nil && p.pid == *sel.PID || sel.PID == nil && sel.Tag != nil && p.tag != nil && *p.tag == *sel.Tag {
			return p, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no such process %s", describe(sel)))
}

func describe(sel selector) string {
	if sel.PID != nil {
		return "pid " + strconv.Itoa(int(*sel.PID))
	}
	if sel.Tag != nil {
		return "tag " + service.Quote(*sel.Tag)
	}
	return "(no pid or tag)"
}

// connectProc follows a running process from now on.
func (s *Server) connectProc(ctx context.Context, req *connect.Request[selectRequest], stream *connect.ServerStream[processEvent]) error {
	p, err := s.boxes.get(sandboxOf(ctx).id).find(req.Msg.Process)
	if err != nil {
		return err
	}
	p.mu.Lock()
	from := len(p.events)
	if p.ended && !p.gone {
		from = len(p.events) - 1 // only its end
	}
	p.mu.Unlock()
	if err := stream.Send(&processEvent{Event: event{Start: &startEvent{PID: p.pid}}}); err != nil {
		return err
	}
	return breakIfGone(p.follow(ctx, from, keepaliveOf(req.Header()), func(ev event) error { return stream.Send(&processEvent{Event: ev}) }))
}

func (s *Server) listProcs(ctx context.Context, _ *connect.Request[empty]) (*connect.Response[listResponse], error) {
	x := s.boxes.get(sandboxOf(ctx).id)
	x.mu.Lock()
	out := listResponse{Processes: []processInfo{}}
	for _, p := range x.procs {
		p.mu.Lock()
		if !p.ended {
			out.Processes = append(out.Processes, processInfo{Config: p.config, PID: p.pid, Tag: p.tag})
		}
		p.mu.Unlock()
	}
	x.mu.Unlock()
	return connect.NewResponse(&out), nil
}

// signal ends a process: SIGTERM and SIGKILL both stop its sandbox.
func (s *Server) signal(ctx context.Context, req *connect.Request[signalRequest]) (*connect.Response[empty], error) {
	switch req.Msg.Signal {
	case "SIGNAL_SIGKILL", "SIGNAL_SIGTERM", "9", "15":
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %s: SIGNAL_SIGKILL and SIGNAL_SIGTERM are supported", service.Quote(string(req.Msg.Signal))))
	}
	p, err := s.boxes.get(sandboxOf(ctx).id).find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	ended := p.ended
	p.mu.Unlock()
	if ended {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %d has ended", p.pid))
	}
	p.cancel()
	return connect.NewResponse(&empty{}), nil
}

// sendInput writes to a process's stdin or terminal (either field goes
// to what the process has).
func (s *Server) sendInput(ctx context.Context, req *connect.Request[inputRequest]) (*connect.Response[empty], error) {
	p, err := s.boxes.get(sandboxOf(ctx).id).find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	in, err := p.inputOf()
	if err != nil {
		return nil, err
	}
	data := req.Msg.Input.Stdin
	if len(data) == 0 {
		data = req.Msg.Input.PTY
	}
	if err := in.Write(data); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}

// closeStdin ends a process's stdin. A process started without one has
// read an empty stdin from the start: closing it again succeeds.
func (s *Server) closeStdin(ctx context.Context, req *connect.Request[selectRequest]) (*connect.Response[empty], error) {
	p, err := s.boxes.get(sandboxOf(ctx).id).find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	in := p.input
	p.mu.Unlock()
	if in == nil {
		return connect.NewResponse(&empty{}), nil
	}
	if err := in.Close(); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}

// update resizes a process's terminal.
func (s *Server) update(ctx context.Context, req *connect.Request[updateRequest]) (*connect.Response[empty], error) {
	p, err := s.boxes.get(sandboxOf(ctx).id).find(req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if req.Msg.PTY == nil {
		return connect.NewResponse(&empty{}), nil // nothing to change
	}
	in, err := p.inputOf()
	if err != nil {
		return nil, err
	}
	size := req.Msg.PTY.Size
	if err := in.Resize(int(min(size.Cols, 1<<20)), int(min(size.Rows, 1<<20))); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}
