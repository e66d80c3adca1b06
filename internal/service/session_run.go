package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/codemode"
	"github.com/codecage/codecage/internal/service/report"
)

// executeInSession runs req in its session's interpreter; refused collects
// the hosts its egress proxy refuses meanwhile. The session table runs it
// (the run lock, the CPU, the limits, the end); the service gives it the
// harness request, the code-mode tools and builds the result.
func (s *Service) executeInSession(ctx context.Context, req Request, limits fleet.Limits, refused *report.Refusals) (*Result, error) {
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, err
	}
	tools, err := s.codeMode.Resolve(ctx, req.Tools)
	if err != nil {
		return nil, err
	}
	lang, _ := fleet.NormalizeLanguage(req.Language)
	sandbox := limits
	if lang != fleet.LangPython {
		sandbox.Timeout += kernelSlack(limits.Timeout)
	}
	run, err := s.sessions.BeginRun(ctx, se, sandbox, refused.Add)
	if errors.Is(err, ErrSessionEnded) && req.RestartIfEnded {
		// Like a kernel that died: restarted, its workspace kept.
		if _, rerr := s.sessions.Restart(ctx, se); rerr == nil {
			s.emit(ctx, Event{Kind: EventSession, Action: "restart", Profile: se.Imports().Label(), Outcome: "success", Detail: se.ID()})
			run, err = s.sessions.BeginRun(ctx, se, sandbox, refused.Add)
		}
	}
	if err != nil {
		return nil, err
	}
	defer run.End()

	imports := se.Imports()
	rreq := fleet.HarnessRequest{
		Code:           req.Code,
		AllowedImports: imports.Modules,
		Profile:        imports.Label(),
		ImportHints:    imports.Hints,
		MaxResultBytes: MaxResultBytes,
		CapturePlots:   imports.Modules == nil || policy.Allows(imports.Modules, "matplotlib"),
		KeepAlive:      true,
		Context:        req.Context,
		NewContext:     req.NewContext,
		Cwd:            req.Cwd,
		Env:            req.Env,
		Display:        req.Display,
	}
	if lang != fleet.LangPython {
		rreq.Language = lang
		rreq.TimeoutMS = int(limits.Timeout.Milliseconds())
	}
	var handler fleet.ToolHandler
	if len(tools) > 0 {
		rreq.Tools = codemode.Specs(tools)
		var done func()
		id := se.ID()
		handler, done = s.codeMode.Caller(ctx, tools, &id)
		defer done()
	}
	handler = s.magicCaller(ctx, se, limits.Timeout, handler)
	o := run.Do(rreq, handler, req.OnOutput)
	res := report.Build(se.ID(), se.Backend(), o, limits, report.Layers(se.Backend()))
	res.Resources.IdleCPUSeconds = run.Idle.Seconds()
	res.Runs = run.Runs
	se.LogStderr(res.Stderr)
	if o.Reply == nil {
		res.Gone = s.sessionGone(ctx, se.ID(), req.Owner)
		if res.Error == nil {
			res.Error = &ErrorInfo{Type: "SessionEnded", Message: "the interpreter ended"}
		}
		// In words every surface shares: each has its own way to restart.
		res.Error.Message += fmt.Sprintf("; session %s has ended: restart it to keep its files (its variables are lost), or create a new one", se.ID())
		res.Success = false
	}
	return res, nil
}

// sessionGone reports whether session id has gone (closed, or at its end
// of life) rather than paused or parked.
func (s *Service) sessionGone(ctx context.Context, id, owner string) bool {
	_, err := s.GetSession(context.WithoutCancel(ctx), id, owner)
	return errors.Is(err, ErrSessionNotFound) || errors.Is(err, ErrSessionLost)
}
