package service

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// Running in a session: code in its interpreter, and commands beside it.

// executeInSession runs req in its session's interpreter; refused collects
// the hosts its egress proxy refuses meanwhile.
func (s *Service) executeInSession(ctx context.Context, req Request, limits fleet.Limits, refused *refusals) (*Result, error) {
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, err
	}
	tools, err := s.runTools(ctx, req.Tools)
	if err != nil {
		return nil, err
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	if err := se.alive(); err != nil {
		return nil, err
	}
	se.used = time.Now()
	se.runs++
	se.info(s.cfg) // what describe gives while this runs
	se.refused.Store(refused)
	defer se.refused.Store(nil)

	lease := se.sandbox()
	idle := se.cpu.begin(lease, s.cfg.CPULimit, s.log())
	s.addIdleCPU(idle)
	lease.Arm(ctx, limits.Timeout, limits.CPUTime)
	rreq := fleet.HarnessRequest{
		Code:           req.Code,
		AllowedImports: se.imports.Modules,
		Profile:        se.imports.Label(),
		ImportHints:    se.imports.Hints,
		MaxResultBytes: MaxResultBytes,
		CapturePlots:   se.imports.Modules == nil || policy.Allows(se.imports.Modules, "matplotlib"),
		KeepAlive:      true,
		Context:        req.Context,
		NewContext:     req.NewContext,
		Cwd:            req.Cwd,
		Env:            req.Env,
		Display:        req.Display,
	}
	var handler fleet.ToolHandler
	if len(tools) > 0 {
		rreq.Tools = toolSpecs(tools)
		var done func()
		handler, done = s.toolCaller(ctx, tools, &se.id)
		defer done()
	}
	o := lease.Run(rreq, handler, req.OnOutput)
	if o.Ended {
		se.ended = endReason(o.Exit)
	} else {
		// Idle until the next request: no timeout but the session's own.
		lease.Arm(context.Background(), time.Until(se.created.Add(s.cfg.SessionMaxLifetime)), s.cfg.SessionMaxLifetime)
	}
	se.cpu.end(lease, s.cfg.IdleCPU, s.log())
	res := buildResult(se.id, se.backend, o, limits)
	res.Resources.IdleCPUSeconds = idle.Seconds()
	if o.Reply == nil {
		if res.Error == nil {
			res.Error = &ErrorInfo{Type: "SessionEnded", Message: "the interpreter ended"}
		}
		res.Error.Message += fmt.Sprintf("; session %s has ended (restart it with restart_session, or create a new one)", se.id)
		res.Success = false
	}
	return res, nil
}

// startCommand registers a command of se that is about to run; it returns
// the command's context (canceled when the session closes), the
// workspace and its uid, and done, to call when the command has ended.
func (se *session) startCommand(ctx context.Context) (context.Context, string, int, func(), error) {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	switch {
	case se.dropped:
		return nil, "", 0, nil, fmt.Errorf("%w: session %s is closed", ErrSessionNotFound, se.id)
	case se.dir == "":
		return nil, "", 0, nil, fmt.Errorf("%w: session %s is still starting; try again", ErrSessionEnded, se.id)
	}
	ctx, cancel := context.WithCancel(ctx)
	if se.commands == nil {
		se.commands = map[*context.CancelFunc]struct{}{}
	}
	se.commands[&cancel] = struct{}{}
	se.cmdsDone.Add(1)
	done := func() {
		cancel()
		se.touched.Store(time.Now().UnixNano())
		se.lifeMu.Lock()
		delete(se.commands, &cancel)
		se.lifeMu.Unlock()
		se.cmdsDone.Done()
	}
	return ctx, se.dir, se.uid, done, nil
}

func endReason(e fleet.Exit) string {
	switch {
	case e.Limit != fleet.LimitNone:
		return "killed at the " + string(e.Limit) + " limit"
	case e.Signal != 0:
		return fmt.Sprintf("the interpreter was killed by signal %d", e.Signal)
	}
	return fmt.Sprintf("the interpreter exited with status %d", e.ExitCode)
}

// alive reports whether the session's interpreter still runs; call with mu.
func (se *session) alive() error {
	if se.ended == "" {
		lease := se.sandbox()
		select {
		case <-lease.Done():
			se.ended = endReason(lease.Wait())
		default:
			return nil
		}
	}
	return fmt.Errorf("%w: %s %s; restart the session to keep its files, or create a new one", ErrSessionEnded, se.id, se.ended)
}
