package envs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// An environment's start and ready commands (envstore.Env.StartCmd and
// ReadyCmd; E2B's setStartCmd and setReadyCmd), run as a session from it
// opens: the start command in the background, as a command of the
// session (its own sandbox beside the interpreter, on the session's
// loopback and workspace), then the ready command until it exits 0,
// before the session is handed out. Both go through the CommandRunner
// (the root's runCommand): the same command jail, the same allow-list
// (SANDBOX_ALLOWED_COMMANDS), the same limits; only the start command's
// lifetime is the session's. The
// operator wrote them, but they run where the agent's code can reach
// them (the loopback, the workspace): they get no program and no
// privilege an agent's command would not.

// readyPoll is the pause between two tries of a ready command.
const readyPoll = 200 * time.Millisecond

// startTailBytes and readyOutputBytes bound what is kept of a start
// command's output (for the error of a session that never became ready)
// and what an error quotes of a ready command's last output.
const (
	startTailBytes   = 4 << 10
	readyOutputBytes = 1 << 10
)

// WithStartCommand is req for a session from e: one whose environment
// starts a server lets its commands serve and connect on the session's
// loopback (session.Request.Servers, as E2B's sandboxes do), or the
// server could neither listen nor be reached by its ready command.
func WithStartCommand(req session.Request, e envstore.Env) session.Request {
	if e.StartCmd != "" {
		req.Servers = true
	}
	return req
}

// Start runs environment e's start command in session se and waits for
// its ready command, within SANDBOX_ENV_READY_TIMEOUT: for a session just
// opened (new, or back from a snapshot, a fork or a park), or one whose
// sandbox started afresh (a resume after a pause without memory, which
// ended them). A session that comes back runs its start command again:
// the command's process was a sandbox of its own beside the interpreter,
// which no snapshot, fork or park holds. An error means the session is
// not ready; the caller closes it.
func (d *Envs) Start(ctx context.Context, se *session.Session, e envstore.Env) error {
	if e.StartCmd == "" && e.ReadyCmd == "" {
		return nil
	}
	id, owner := se.ID(), se.Request().Owner
	var ended <-chan startEnd
	var out *tailWriter
	if e.StartCmd != "" {
		var err error
		if ended, out, err = d.startDaemon(ctx, id, owner, e.StartCmd); err != nil {
			return fmt.Errorf("environment %s: its start command %s did not start: %w", bounded.Quote(e.Name), bounded.Quote(e.StartCmd), err)
		}
	}
	if e.ReadyCmd == "" {
		return nil
	}
	return d.awaitReady(ctx, id, owner, e, ended, out)
}

// startEnd is how a start command ended.
type startEnd struct {
	res CommandOutcome
	err error
}

// startDaemon starts command in session id as a daemon of the session
// and returns once its sandbox runs it: ended then reports its end (the
// session's close ends it), out holds the end of its output.
func (d *Envs) startDaemon(ctx context.Context, id, owner, command string) (<-chan startEnd, *tailWriter, error) {
	out := &tailWriter{max: startTailBytes}
	started := make(chan struct{})
	ended := make(chan startEnd, 1)
	go func() {
		// It outlives the request that opened the session.
		res, err := d.o.Commands.RunCommand(context.WithoutCancel(ctx), Command{Command: command, SessionID: id, Owner: owner,
			OnStart: func() { close(started) }, Daemon: out})
		if err == nil {
			d.o.Log.Info("an environment's start command ended", "session", id, "exit", res.ExitCode, "limit", limitName(res.Limit))
		}
		ended <- startEnd{res: res, err: err}
	}()
	select {
	case <-started:
		return ended, out, nil
	case end := <-ended:
		if end.err != nil {
			return nil, nil, end.err
		}
		return ended, out, nil // started and ended already: the ready command judges
	}
}

// awaitReady runs e's ready command in session id every readyPoll until
// it exits 0. It fails when SANDBOX_ENV_READY_TIMEOUT passes, or when
// the start command has failed (it will not become ready), with the
// last output of each.
func (d *Envs) awaitReady(ctx context.Context, id, owner string, e envstore.Env, ended <-chan startEnd, out *tailWriter) error {
	deadline := time.Now().Add(d.cfg.EnvReadyTimeout)
	var last string
	for tries := 1; ; tries++ {
		timeout := min(max(time.Until(deadline), time.Second), d.cfg.MaxCommandTime)
		res, err := d.o.Commands.RunCommand(ctx, Command{Command: e.ReadyCmd, SessionID: id, Owner: owner, Timeout: timeout})
		if err != nil {
			return fmt.Errorf("environment %s: its ready command %s: %w", bounded.Quote(e.Name), bounded.Quote(e.ReadyCmd), err)
		}
		if res.Success {
			return nil
		}
		last = commandOutcome(res)
		select {
		case end := <-ended:
			ended = nil // reported once
			if failed, why := startFailed(end); failed {
				return fmt.Errorf("%w: environment %s: its start command %s %s (output: %s); its ready command %s %s",
					errdefs.ErrUnavailable, bounded.Quote(e.Name), bounded.Quote(e.StartCmd), why, quoteTail(out.String()), bounded.Quote(e.ReadyCmd), last)
			}
		default:
		}
		if time.Now().Add(readyPoll).After(deadline) {
			msg := fmt.Sprintf("environment %s: the session was not ready within %s (SANDBOX_ENV_READY_TIMEOUT): its ready command %s failed %d times, the last %s",
				bounded.Quote(e.Name), d.cfg.EnvReadyTimeout, bounded.Quote(e.ReadyCmd), tries, last)
			if out != nil {
				msg += "; the start command's output: " + quoteTail(out.String())
			}
			return fmt.Errorf("%w: %s", errdefs.ErrUnavailable, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(readyPoll):
		}
	}
}

// startFailed says whether a start command that ended failed, and how.
func startFailed(end startEnd) (bool, string) {
	switch {
	case end.err != nil:
		return true, "failed: " + end.err.Error()
	case end.res.Limit != nil:
		return true, "was killed at its " + *end.res.Limit + " limit"
	case end.res.ExitCode != 0:
		if end.res.Error != nil {
			return true, "ended: " + *end.res.Error
		}
		return true, fmt.Sprintf("exited with status %d", end.res.ExitCode)
	}
	return false, ""
}

// commandOutcome describes a failed ready command: its status or limit,
// and the end of its output, bounded.
func commandOutcome(res CommandOutcome) string {
	why := fmt.Sprintf("exited with status %d", res.ExitCode)
	if res.Error != nil {
		why = *res.Error
	}
	return why + " (output: " + quoteTail(res.Output) + ")"
}

// quoteTail is the end of a command's output for an error message: at
// most readyOutputBytes, valid UTF-8, quoted.
func quoteTail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > readyOutputBytes {
		s = "…" + strings.ToValidUTF8(s[len(s)-readyOutputBytes:], "")
	}
	return fmt.Sprintf("%q", s)
}

func limitName(l *string) string {
	if l == nil {
		return ""
	}
	return *l
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.max {
		t.b = append(t.b[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return len(p), nil
}

func (t *tailWriter) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
