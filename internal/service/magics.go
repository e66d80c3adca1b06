package service

import (
	"context"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/codemode"
	"github.com/codecage/codecage/internal/service/commands"
	"github.com/codecage/codecage/internal/service/packages"
	"github.com/codecage/codecage/internal/session"
)

// magicCaller answers the magics of a run in session se (nil: a run
// without a session, whose magics are refused), and hands every other call
// to tools (nil: none). A magic ("!cmd", "%%bash", "%pip install") goes
// through the same domain and policy as the request it stands for
// (RunCommand, PipInstall), without its envelope: it is work the admitted
// run does for itself, in the run's context (already admitted and bound to
// shutdown), and the run's session and run lock serve it. The harness asks
// one call at a time, so a run's magics never run side by side, and runs
// no program itself.
func (s *Service) magicCaller(ctx context.Context, se *session.Session, timeout time.Duration, tools fleet.ToolHandler) fleet.ToolHandler {
	return func(c *fleet.ToolCall) fleet.ToolResult {
		switch {
		case !codemode.IsMagic(c) && tools == nil:
			return fleet.ToolResult{ID: c.ID, Error: "this run has no tools"}
		case !codemode.IsMagic(c):
			return tools(c)
		case se == nil:
			return fleet.ToolResult{ID: c.ID, Error: "shell commands (!cmd) and %pip run only in a session: they share its workspace"}
		}
		return codemode.AnswerMagic(c, func(a codemode.MagicArgs) (any, error) {
			if c.Tool == codemode.MagicShell {
				return s.magicShell(ctx, se, timeout, a.Command, a.Cwd)
			}
			return s.magicPip(ctx, se, a.Package, a.Version)
		})
	}
}

// magicShell runs a "!cmd" line as commands.run would, in the session's
// workspace, from the interpreter's directory when that is inside it.
// A program the policy does not allow is an error of the call (the code
// gets an exception), not an output.
func (s *Service) magicShell(ctx context.Context, se *session.Session, timeout time.Duration, command, cwd string) (any, error) {
	dir := ""
	if home := se.Home(); cwd == home || strings.HasPrefix(cwd, home+"/") {
		dir = cwd
	}
	req := CommandRequest{Command: command, WorkingDir: dir, SessionID: se.ID(), Timeout: min(timeout, s.cfg.MaxCommandTime)}
	start := time.Now()
	res, err := s.cmds.Run(ctx, se, req)
	if err != nil {
		s.emitFailure(ctx, EventCommand, "", "", commands.Line(req), err, start)
		return nil, err
	}
	s.emit(ctx, commandEvent(req, res, time.Since(start)))
	if res.Error != nil {
		if _, denied := commands.NotAllowed(*res.Error); denied {
			return nil, errorText(*res.Error)
		}
	}
	stderr := res.Stderr
	if res.Error != nil && res.Limit != nil {
		stderr += *res.Error + "\n" // a limit ended it: said where the output is
	}
	return map[string]any{"stdout": res.Stdout, "stderr": stderr, "exit_code": res.ExitCode}, nil
}

// magicPip installs a package for a "%pip install" line, under the run's
// lock of the session (pip_install takes it itself).
func (s *Service) magicPip(ctx context.Context, se *session.Session, pkg, version string) (*InstallResult, error) {
	req := InstallRequest{Package: pkg, Version: version, SessionID: se.ID()}
	start := time.Now()
	r, err := packages.Parse(req)
	var res *InstallResult
	if err == nil {
		res, err = s.pkgs.Install(ctx, se, r, start)
	}
	if err != nil {
		s.emitFailure(ctx, EventInstall, "", "", req.Package, err, start)
		return nil, err
	}
	s.emit(ctx, installEvent(req, res, time.Since(start)))
	return res, nil
}

type errorText string

func (e errorText) Error() string { return string(e) }
