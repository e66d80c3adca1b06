package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

// envd's process service, translated: the processes are the service's
// (StartProcess and the others), kept by the replica that holds the
// sandbox, so that any replica serves them.

// start runs a command in the sandbox: a start event at once, its output
// while it runs, its end.
func (s *Server) start(ctx context.Context, req *connect.Request[wire.StartRequest], stream *connect.ServerStream[wire.ProcessEvent]) error {
	ref := sandboxOf(ctx)
	m := req.Msg
	if m.Process.Cmd == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	if token, ok := gatewayCommand(m.Process.Cmd, m.Process.Args, m.Process.Envs); ok {
		// Never run, nor logged: its line holds the creator's secrets.
		return s.startGateway(ctx, token, stream)
	}
	creq := service.CommandRequest{SessionID: ref.id, Owner: ref.owner, Argv: append([]string{m.Process.Cmd}, m.Process.Args...), Env: m.Process.Envs,
		User: envdUser(req.Header().Get("Authorization"))}
	creq.Stdin = m.Stdin != nil && *m.Stdin
	if len(m.PTY) > 0 && string(m.PTY) != "null" {
		var pty wire.PTYConfig
		if err := json.Unmarshal(m.PTY, &pty); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("pty: %v", err))
		}
		cols, rows := terminalSize(pty.Size.Cols, pty.Size.Rows)
		creq.Terminal = &service.TerminalSize{Cols: cols, Rows: rows}
	}
	if m.Process.Cwd != nil && *m.Process.Cwd != "" {
		cwd := *m.Process.Cwd
		if rest, ok := strings.CutPrefix(cwd, "~"); ok {
			home := Home
			if creq.User == "root" {
				home = service.RootHome
			}
			cwd = home + rest
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
	// timeoutMs 0: as long as the service lets it (a machine's life).
	limit := s.cfg.SessionMaxLifetime
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl))
	}
	creq.Timeout, creq.TimeoutCeiling = max(limit, time.Second), true
	// A request the service refuses (rate limit, budget, a gone sandbox)
	// is an error of the call, before any event.
	p, err := s.svc.StartProcess(ctx, service.ProcessRequest{Command: creq, Tag: m.Tag, Spec: service.ProcessSpec(m.Process)})
	if err != nil {
		return rpcError(err)
	}
	return s.follow(ctx, req.Header(), service.ProcessSelector{PID: &p.PID}, true, stream)
}

// follow streams a process's start event, its output from its start or
// from now, and its end. A process that went with its sandbox breaks the stream, as a VM's
// connection does.
func (s *Server) follow(ctx context.Context, h interface{ Get(string) string }, sel service.ProcessSelector, fromStart bool, stream *connect.ServerStream[wire.ProcessEvent]) error {
	ref := sandboxOf(ctx)
	res, err := s.svc.FollowProcess(ctx, ref.id, ref.owner, sel, fromStart, keepaliveOf(h), func(ev service.ProcessEvent) error {
		return stream.Send(&wire.ProcessEvent{Event: eventOf(ev)})
	})
	if err != nil {
		if errors.Is(err, service.ErrSessionGone) {
			breakStream()
		}
		var ce *connect.Error
		if errors.As(err, &ce) || errors.Is(err, context.Canceled) {
			return err
		}
		return rpcError(err)
	}
	return stream.Send(&wire.ProcessEvent{Event: wire.Event{End: endOf(res)}})
}

// envdUser is the user an envd call runs as: the SDKs name it in
// HTTP basic authentication ("Basic base64(user:)"), the sandbox's user
// when they name none. The service refuses a user it does not know.
func envdUser(auth string) string {
	b64, ok := strings.CutPrefix(auth, "Basic ")
	if !ok {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return "\x00" // refused as a user, naming no secret
	}
	user, _, _ := strings.Cut(string(b), ":")
	return user
}

// eventOf is a piece of a process's output as envd sends it.
func eventOf(ev service.ProcessEvent) wire.Event {
	switch ev.Stream {
	case "start":
		return wire.Event{Start: &wire.StartEvent{PID: ev.PID}}
	case "keepalive":
		return wire.Event{Keepalive: &wire.Empty{}}
	case "pty":
		return wire.Event{Data: &wire.DataEvent{PTY: ev.Data}}
	case "stderr":
		return wire.Event{Data: &wire.DataEvent{Stderr: ev.Data}}
	}
	return wire.Event{Data: &wire.DataEvent{Stdout: ev.Data}}
}

func endOf(res *service.CommandResult) *wire.EndEvent {
	if res.Limit != nil {
		msg := "signal: killed"
		if res.Error != nil {
			msg += " (" + *res.Error + ")"
		}
		return &wire.EndEvent{ExitCode: -1, Exited: false, Status: "signal: killed", Error: &msg}
	}
	if res.Signal > 0 && res.Signal < 65 {
		// As envd says it (Go's os/exec): "signal: segmentation fault".
		status := "signal: " + syscall.Signal(res.Signal).String()
		return &wire.EndEvent{ExitCode: -1, Exited: false, Status: status, Error: &status}
	}
	status := "exit status " + strconv.Itoa(res.ExitCode)
	end := &wire.EndEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: status}
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

// connectProc follows a running process from now on (an ended one: only
// its end).
func (s *Server) connectProc(ctx context.Context, req *connect.Request[wire.SelectRequest], stream *connect.ServerStream[wire.ProcessEvent]) error {
	return s.follow(ctx, req.Header(), service.ProcessSelector(req.Msg.Process), false, stream)
}

func (s *Server) listProcs(ctx context.Context, _ *connect.Request[wire.Empty]) (*connect.Response[wire.ListResponse], error) {
	ref := sandboxOf(ctx)
	list, err := s.svc.ListProcesses(ctx, ref.id, ref.owner)
	if err != nil {
		return nil, rpcError(err)
	}
	out := wire.ListResponse{Processes: []wire.ProcessInfo{}}
	for _, p := range list {
		out.Processes = append(out.Processes, wire.ProcessInfo{Config: wire.ProcessConfig(p.Spec), PID: p.PID, Tag: p.Tag})
	}
	return connect.NewResponse(&out), nil
}

// signal ends a process: SIGTERM and SIGKILL both stop its sandbox.
func (s *Server) signal(ctx context.Context, req *connect.Request[wire.SignalRequest]) (*connect.Response[wire.Empty], error) {
	switch req.Msg.Signal {
	case "SIGNAL_SIGKILL", "SIGNAL_SIGTERM", "9", "15":
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %s: SIGNAL_SIGKILL and SIGNAL_SIGTERM are supported", service.Quote(string(req.Msg.Signal))))
	}
	ref := sandboxOf(ctx)
	return answer(s.svc.SignalProcess(ctx, ref.id, ref.owner, service.ProcessSelector(req.Msg.Process)))
}

// sendInput writes to a process's stdin or terminal (either field goes
// to what the process has).
func (s *Server) sendInput(ctx context.Context, req *connect.Request[wire.InputRequest]) (*connect.Response[wire.Empty], error) {
	data := req.Msg.Input.Stdin
	if len(data) == 0 {
		data = req.Msg.Input.PTY
	}
	return s.input(ctx, req.Msg.Process, service.ProcessInput{Write: true, Data: data})
}

// closeStdin ends a process's stdin.
func (s *Server) closeStdin(ctx context.Context, req *connect.Request[wire.SelectRequest]) (*connect.Response[wire.Empty], error) {
	return s.input(ctx, req.Msg.Process, service.ProcessInput{Close: true})
}

// update resizes a process's terminal.
func (s *Server) update(ctx context.Context, req *connect.Request[wire.UpdateRequest]) (*connect.Response[wire.Empty], error) {
	in := service.ProcessInput{} // nothing to change: the process is only checked
	if req.Msg.PTY != nil {
		cols, rows := terminalSize(req.Msg.PTY.Size.Cols, req.Msg.PTY.Size.Rows)
		in.Resize = &service.TerminalSize{Cols: cols, Rows: rows}
	}
	return s.input(ctx, req.Msg.Process, in)
}

func (s *Server) input(ctx context.Context, sel wire.Selector, in service.ProcessInput) (*connect.Response[wire.Empty], error) {
	ref := sandboxOf(ctx)
	return answer(s.svc.SendProcessInput(ctx, ref.id, ref.owner, service.ProcessSelector(sel), in))
}

// answer is an empty answer, or err as envd's code.
func answer(err error) (*connect.Response[wire.Empty], error) {
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&wire.Empty{}), nil
}

// terminalSize is a terminal's size as E2B's clients send it: a side of
// 0 (a client whose own terminal reports no size, as the CLI's when its
// output is not a terminal; E2B's envd passes it through) is the usual
// 80 columns or 24 rows; past a bound the service refuses it.
func terminalSize(cols, rows uint32) (int, int) {
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	return int(min(cols, 1<<20)), int(min(rows, 1<<20))
}

// endProcesses ends the sandbox's processes (a reboot: they start afresh).
func (s *Server) endProcesses(ctx context.Context, id, owner string) {
	list, _ := s.svc.ListProcesses(ctx, id, owner)
	for _, p := range list {
		_ = s.svc.SignalProcess(ctx, id, owner, service.ProcessSelector{PID: &p.PID})
	}
}
