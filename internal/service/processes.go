package service

import (
	"context"
	"encoding/base64"
	"strconv"
	"time"

	"github.com/codecage/codecage/internal/service/commands"
)

// Processes (E2B's) are commands started in the background of a session
// (the commands domain keeps them, commands/process.go). Each operation is
// forwarded to the replica that holds the session, so any replica serves
// any session's processes; a process's run is a command request of its
// own, admitted and audited as one, on a goroutine the drain waits for.

type (
	// ProcessSpec is how a process was asked for, given back when listed.
	ProcessSpec = commands.ProcessSpec
	// ProcessInfo describes a process of a session.
	ProcessInfo = commands.ProcessInfo
	// ProcessEvent is a piece of a process's output.
	ProcessEvent = commands.ProcessEvent
	// ProcessSelector names a process by its pid, or else its tag.
	ProcessSelector = commands.Selector
	// ProcessInput writes to, ends or resizes a process's input.
	ProcessInput = commands.ProcessInput
)

// ProcessRequest starts a process: Command (whose SessionID and Owner
// name its session), described by Spec and Tag when listed.
type ProcessRequest struct {
	Command CommandRequest `json:"command"`
	Tag     *string        `json:"tag,omitempty"`
	Spec    ProcessSpec    `json:"spec"`
}

// followArgs and inputArgs are those operations' arguments across
// replicas.
type followArgs struct {
	Select    ProcessSelector `json:"select"`
	FromStart bool            `json:"from_start,omitempty"`
	Keepalive time.Duration   `json:"keepalive,omitempty"`
}

type inputArgs struct {
	Select ProcessSelector `json:"select"`
	Input  ProcessInput    `json:"input"`
}

// Operations on a session's processes.
const (
	opStartProcess  = "start_process"
	opFollowProcess = "follow_process"
	opProcessInput  = "process_input"
	opSignalProcess = "signal_process"
	opListProcesses = "list_processes"
)

// StartProcess starts req's command in its session, and returns once it
// runs (or why it never will). It runs on, whatever the caller does, until
// it ends, is signalled, or its session goes.
func (s *Service) StartProcess(ctx context.Context, req ProcessRequest) (*ProcessInfo, error) {
	id, owner := req.Command.SessionID, req.Command.Owner
	fwd := req
	fwd.Command.OnOutput, fwd.Command.OnStart, fwd.Command.OnInput = nil, nil, nil
	return do(ctx, s, opStartProcess, call[*ProcessInfo]{
		session: id, owner: owner, args: fwd,
		run: func(ctx context.Context) (*ProcessInfo, error) {
			if _, err := s.session(id, owner); err != nil {
				return nil, err
			}
			// The process outlives this request: its own context, with the
			// caller its command request is admitted and audited for.
			// None (an in-process call) stays none: an empty caller would
			// be an anonymous key, not the operator.
			base := context.Background()
			if c, ok := CallerFrom(ctx); ok {
				base = WithCaller(base, c)
			}
			bg, cancel := context.WithCancel(base)
			p := s.procs.Add(id, owner, req.Tag, req.Spec, cancel)
			run := func(r CommandRequest) (*CommandResult, error) { return s.RunCommand(bg, r) }
			gone := func() bool { return s.sessionGone(bg, id, owner) }
			if err := s.spawn(func() { s.procs.Run(id, p, req.Command, run, gone) }); err != nil {
				cancel()
				s.procs.Forget(id, p)
				return nil, err
			}
			if err := p.WaitStarted(ctx); err != nil {
				return nil, err
			}
			info := p.Info()
			return &info, nil
		},
	})
}

// FollowProcess sends session id's process sel's start event to onEvent,
// then its output from its start (fromStart) or from now, until its end, which it returns;
// ctx ending stops the following, not the process. A process quiet for
// keepalive sends a keepalive event; one that went with its session
// returns ErrSessionGone.
func (s *Service) FollowProcess(ctx context.Context, id, owner string, sel ProcessSelector, fromStart bool, keepalive time.Duration, onEvent func(ProcessEvent) error) (*CommandResult, error) {
	return do(ctx, s, opFollowProcess, call[*CommandResult]{
		session: id, owner: owner, args: followArgs{Select: sel, FromStart: fromStart, Keepalive: keepalive},
		// Across replicas an event is a line of output, its bytes in
		// base64 (a terminal's need not be UTF-8); a start's, its pid.
		onOutput: func(stream, line string) {
			ev := ProcessEvent{Stream: stream}
			if stream == "start" {
				pid, _ := strconv.ParseUint(line, 10, 32)
				ev.PID = uint32(pid)
			} else {
				ev.Data, _ = base64.StdEncoding.DecodeString(line)
			}
			_ = onEvent(ev)
		},
		run: func(ctx context.Context) (*CommandResult, error) {
			p, err := s.procs.Find(id, owner, sel)
			if err != nil {
				return nil, err
			}
			return p.Follow(ctx, fromStart, keepalive, onEvent)
		},
	})
}

// SendProcessInput does in to the input of session id's process sel.
func (s *Service) SendProcessInput(ctx context.Context, id, owner string, sel ProcessSelector, in ProcessInput) error {
	_, err := do(ctx, s, opProcessInput, call[struct{}]{
		session: id, owner: owner, args: inputArgs{Select: sel, Input: in},
		run: func(context.Context) (struct{}, error) {
			p, err := s.procs.Find(id, owner, sel)
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, p.Input(in)
		},
	})
	return err
}

// SignalProcess ends session id's process sel.
func (s *Service) SignalProcess(ctx context.Context, id, owner string, sel ProcessSelector) error {
	_, err := do(ctx, s, opSignalProcess, call[struct{}]{
		session: id, owner: owner, args: sel,
		run: func(context.Context) (struct{}, error) {
			p, err := s.procs.Find(id, owner, sel)
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, p.Signal()
		},
	})
	return err
}

// ListProcesses lists session id's processes that still run.
func (s *Service) ListProcesses(ctx context.Context, id, owner string) ([]ProcessInfo, error) {
	return do(ctx, s, opListProcesses, call[[]ProcessInfo]{
		session: id, owner: owner,
		run: func(context.Context) ([]ProcessInfo, error) {
			if _, err := s.session(id, owner); err != nil {
				return nil, err
			}
			return s.procs.List(id, owner), nil
		},
	})
}

func processOps() map[string]op {
	return map[string]op{
		// A process's run is a command request of its own, admitted and
		// audited as one; these only reach it.
		opStartProcess:  {admit: admitNone, kind: EventCommand, action: "start_process", quiet: true, peer: peerOp[ProcessRequest, *ProcessInfo]{run: runStart, do: serveStartProcess}},
		opFollowProcess: {admit: admitNone, kind: EventCommand, action: "follow_process", quiet: true, parked: parkLeave, peer: peerOp[followArgs, *CommandResult]{run: runFollow, do: serveFollowProcess}},
		opProcessInput:  {admit: admitLight, kind: EventCommand, action: "process_input", quiet: true, parked: parkLeave, peer: peerOp[inputArgs, struct{}]{do: serveProcessInput}},
		opSignalProcess: {admit: admitLight, kind: EventCommand, action: "signal_process", parked: parkLeave, peer: peerOp[ProcessSelector, struct{}]{do: serveSignalProcess}},
		opListProcesses: {admit: admitNone, kind: EventCommand, action: "list_processes", quiet: true, parked: parkLeave, peer: peerOp[noArgs, []ProcessInfo]{do: serveListProcesses}},
	}
}

func serveStartProcess(ctx context.Context, s *Service, call PeerCall, req ProcessRequest, _ outputFunc) (*ProcessInfo, error) {
	req.Command.SessionID, req.Command.Owner = call.SessionID, call.Owner
	return s.StartProcess(ctx, req)
}

func serveFollowProcess(ctx context.Context, s *Service, call PeerCall, a followArgs, out outputFunc) (*CommandResult, error) {
	return s.FollowProcess(ctx, call.SessionID, call.Owner, a.Select, a.FromStart, a.Keepalive, func(ev ProcessEvent) error {
		switch {
		case out == nil:
		case ev.Stream == "start":
			out(ev.Stream, strconv.FormatUint(uint64(ev.PID), 10))
		default:
			out(ev.Stream, base64.StdEncoding.EncodeToString(ev.Data))
		}
		return nil
	})
}

func serveProcessInput(ctx context.Context, s *Service, call PeerCall, a inputArgs, _ outputFunc) (struct{}, error) {
	return struct{}{}, s.SendProcessInput(ctx, call.SessionID, call.Owner, a.Select, a.Input)
}

func serveSignalProcess(ctx context.Context, s *Service, call PeerCall, sel ProcessSelector, _ outputFunc) (struct{}, error) {
	return struct{}{}, s.SignalProcess(ctx, call.SessionID, call.Owner, sel)
}

func serveListProcesses(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) ([]ProcessInfo, error) {
	return s.ListProcesses(ctx, call.SessionID, call.Owner)
}

// runStart: a process's command starts (its sandbox, under gVisor too).
func runStart(*Service, ProcessRequest) time.Duration { return time.Minute }

// runFollow: a process runs up to the longest a command may.
func runFollow(s *Service, _ followArgs) time.Duration { return s.cfg.MaxCommandTime }
