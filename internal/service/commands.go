package service

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/commands"
	"github.com/codecage/codecage/internal/service/report"
)

// The commands domain (internal/service/commands) runs the commands; the
// root admits, forwards and audits each request, and resolves its session.
// These names keep the surfaces' spelling (service.CommandRequest).

// EventCommand is the event kind of run_command.
const EventCommand = commands.EventCommand

type (
	// CommandRequest asks to run a command line or a program.
	CommandRequest = commands.CommandRequest
	// CommandResult is run_command's result.
	CommandResult = commands.CommandResult
	// TerminalSize is a terminal's size in characters.
	TerminalSize = commands.TerminalSize
	// CommandInput writes to a running command's stdin or terminal.
	CommandInput = commands.CommandInput
)

// Bounds of a command's arguments and input (the commands domain
// documents each).
const (
	LimitCanceled = commands.LimitCanceled
	MaxArgLen     = commands.MaxArgLen
	MaxArgTotal   = commands.MaxArgTotal
	MaxInputChunk = commands.MaxInputChunk
	InputWait     = commands.InputWait
	// RootHome is root's home in a machine with root inside.
	RootHome = commands.RootHome
)

// ShellQuote is s as one word for sh.
func ShellQuote(s string) string { return commands.ShellQuote(s) }

// RunCommand runs a command line in the command jail: the same namespaces,
// limits, seccomp and teardown as a Python run, on a root that holds only
// the allowed programs (the kernel refuses to execute anything else). In a
// gVisor session, or with SANDBOX_ISOLATION=gvisor, that root is built
// under gVisor where its kernel refuses execution from the noexec
// workspace and /tmp as Linux does (it has no Landlock): see
// commands.Commands.backend.
func (s *Service) RunCommand(ctx context.Context, req CommandRequest) (*CommandResult, error) {
	sink := report.NewSink(req.OnOutput)
	req.OnOutput = sink.OnOutput()
	res, err := s.runCommandRequest(ctx, req)
	if dropped := sink.Finish(report.DrainWait); res != nil {
		res.OutputDropped = report.AddDropped(res.OutputDropped, dropped)
	}
	return res, err
}

// runCommandRequest is RunCommand with its output behind a sink.
func (s *Service) runCommandRequest(ctx context.Context, req CommandRequest) (*CommandResult, error) {
	if req.Interactive() && s.remote(req.SessionID) != "" && !s.sessions.Has(req.SessionID) {
		// Its input would have to follow it to the other replica.
		return nil, fmt.Errorf("%w: stdin and terminals are served by the replica that holds the session; connect to it", ErrInvalidRequest)
	}
	fwd := req
	fwd.OnOutput, fwd.OnStart, fwd.OnInput = nil, nil, nil
	return do(ctx, s, opCommand, call[*CommandResult]{
		session: req.SessionID, owner: req.Owner, args: fwd, onOutput: req.OnOutput,
		onForward: func() {
			if req.OnStart != nil {
				req.OnStart() // the other replica runs it: as good as started
			}
		},
		forwardAction: "session:" + req.SessionID,
		code:          commands.Line(req),
		run:           func(ctx context.Context) (*CommandResult, error) { return s.runCommand(ctx, req) },
		success:       func(res *CommandResult, took time.Duration) Event { return commandEvent(req, res, took) },
	})
}

// opCommand runs a command (RunCommand).
const opCommand = "command"

func commandOps() map[string]op {
	return map[string]op{
		opCommand: {admit: admitHeavy, kind: EventCommand, peer: peerOp[CommandRequest, *CommandResult]{run: runCommandCall, do: serveCommand}},
	}
}

func serveCommand(ctx context.Context, s *Service, call PeerCall, req CommandRequest, out outputFunc) (*CommandResult, error) {
	req.SessionID, req.Owner, req.OnOutput = call.SessionID, call.Owner, out
	return s.RunCommand(ctx, req)
}

// runCommandCall: a command may take its own timeout, or the default one.
func runCommandCall(s *Service, req CommandRequest) time.Duration {
	return max(s.cfg.Timeout, req.Timeout)
}

// commandEvent is the event of a command that ran.
func commandEvent(req CommandRequest, res *CommandResult, took time.Duration) Event {
	ev := Event{Kind: EventCommand, ExecutionID: res.ExecutionID, Backend: res.Backend, Code: commands.Line(req), Duration: took, Outcome: "success"}
	switch {
	case res.Limit != nil:
		ev.Outcome, ev.Limit = *res.Limit, *res.Limit
	case !res.Success:
		ev.Outcome = "error"
	}
	if res.Error != nil {
		ev.Detail = *res.Error
		if program, ok := commands.NotAllowed(*res.Error); ok {
			ev.SecurityEvents = []string{"command_denied:" + program}
		}
	}
	if req.SessionID != "" {
		ev.Action = "session:" + req.SessionID
	}
	return ev
}

// runCommand runs req here, in its session when it names one.
func (s *Service) runCommand(ctx context.Context, req CommandRequest) (*CommandResult, error) {
	if req.SessionID == "" {
		return s.cmds.Run(ctx, nil, req)
	}
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, err
	}
	return s.cmds.Run(ctx, se, req)
}

// runDaemon runs req as the daemon of its session (an environment's start
// command, envwire.go), its output kept by out.
func (s *Service) runDaemon(ctx context.Context, req CommandRequest, out commands.Daemon) (*CommandResult, error) {
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, err
	}
	return s.cmds.RunDaemon(ctx, se, req, out)
}

// CommandsInfo lists what run_command may run on this host.
func (s *Service) CommandsInfo() (allowed, missing []string) { return s.cmds.Info() }

// limitMessage is a limit's explanation, as a run's result words it.
func limitMessage(l fleet.Limit, lim fleet.Limits) string { return report.LimitError(l, lim).Message }
