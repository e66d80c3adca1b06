package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// Pausing a session: it stops running and uses no CPU until it resumes.
//
// A pause that keeps memory freezes the session's sandbox where it
// stands (the cgroup freezer natively, runsc pause under gVisor): the
// sandbox keeps its slot of the budget and its memory, and a resume lets
// it run on from there. A pause that does not keep memory ends the
// sandbox, freeing its slot, and keeps the workspace: a resume starts a
// fresh interpreter on it, as a restart does (E2B's filesystem-only
// pause). Either way the session keeps its id, workspace, uid and owner.
//
// A paused session is not reaped for idleness, and its lifetime (a
// deadline) does not run out while it is paused: it ends when it is
// closed, or at SANDBOX_SESSION_MAX_LIFETIME from its creation, as every
// session does.

// pauseState is what a paused session kept.
type pauseState int

const (
	running     pauseState = iota
	pausedAlive            // frozen, memory and slot kept
	pausedCold             // sandbox ended, workspace kept
)

// Pause pauses se, waiting for a request in progress in it to end. A
// paused session answers ErrPaused.
func (t *Table) Pause(ctx context.Context, se *Session, keepMemory bool) (Info, error) {
	return t.pause(ctx, se, keepMemory, false)
}

// pause pauses se; atTimeout: its lifetime ran out, and a resume gives it
// that lifetime again (E2B's timeout pause, then a wake).
func (t *Table) pause(ctx context.Context, se *Session, keepMemory, atTimeout bool) (Info, error) {
	if err := lockCtx(ctx, se); err != nil {
		return Info{}, err
	}
	defer se.mu.Unlock()
	if se.paused != running {
		return Info{}, fmt.Errorf("%w: session %s is paused already", ErrPaused, se.id)
	}
	if err := se.alive(); err != nil {
		return Info{}, err
	}
	lease := se.sandbox()
	t.addIdleCPU(se.cpu.settle(lease))
	if keepMemory {
		// The commands run in sandboxes of their own beside the
		// interpreter: they pause with it, as a machine's processes do.
		if err := se.freeze(); err != nil {
			return Info{}, fmt.Errorf("%w: pause: %v", ErrUnavailable, err)
		}
		if err := lease.Pause(); err != nil {
			se.thaw()
			return Info{}, fmt.Errorf("%w: pause: %v", ErrUnavailable, err)
		}
		se.paused = pausedAlive
	} else {
		se.stopCold()
	}
	se.pausedAt = time.Now()
	how := "its memory kept"
	if !keepMemory {
		how = "its files kept, its processes ended"
	}
	if atTimeout {
		how += ", at its timeout"
	}
	se.Log(LevelInfo, "session paused: "+how, nil)
	// A paused machine's watches end with its envd; none starts until it
	// resumes.
	se.endWatches(true)
	se.stopExpiry(atTimeout)
	return se.info(t.cfg), nil
}

// Resume makes a paused session run again; resumed is false when it
// was running.
func (t *Table) Resume(ctx context.Context, se *Session) (info Info, resumed bool, err error) {
	if err := lockCtx(ctx, se); err != nil {
		return Info{}, false, err
	}
	defer se.mu.Unlock()
	if se.paused == running {
		if err := se.alive(); err != nil {
			return Info{}, false, err
		}
		return se.info(t.cfg), false, nil
	}
	if err := t.resume(ctx, se); err != nil {
		return Info{}, false, err
	}
	return se.info(t.cfg), true, nil
}

// resume thaws or restarts a paused session; call with se.mu.
func (t *Table) resume(ctx context.Context, se *Session) error {
	switch se.paused {
	case pausedAlive:
		if err := se.sandbox().Resume(); err != nil {
			return fmt.Errorf("%w: resume: %v", ErrEnded, err)
		}
		se.thaw()
	case pausedCold:
		if err := t.start(ctx, se, t.opts.Fleet.Start); err != nil {
			return err
		}
		if t.opts.Rebooted != nil {
			se.paused = running // its commands run in a running session
			if err := t.opts.Rebooted(ctx, se); err != nil {
				se.stopCold()
				return err
			}
		}
	}
	how := "from memory"
	if se.paused == pausedCold {
		how = "on a fresh interpreter, its files kept"
	}
	se.paused, se.pausedAt = running, time.Time{}
	se.used = time.Now()
	se.Log(LevelInfo, "session resumed "+how, nil)
	se.endWatches(false)
	if se.leftAtPause > 0 {
		// The lifetime did not run while paused: what was left at the
		// pause is left now.
		t.ExpireAfter(se, se.leftAtPause)
		se.leftAtPause = 0
	}
	return nil
}

// wake resumes a paused session for a request that reached it (call
// with se.mu): a session with manual resume answers ErrPaused instead.
func (t *Table) wake(ctx context.Context, se *Session) error {
	if se.paused == running {
		return nil
	}
	if se.req.ManualResume {
		return fmt.Errorf("%w: session %s is paused; resume it first", ErrPaused, se.id)
	}
	return t.resume(ctx, se)
}

// stopCold ends se's sandbox and commands, its workspace kept: a pause
// without memory. Call with mu.
func (se *Session) stopCold() {
	// Without memory, a machine's processes end: so do its commands.
	se.endCommands()
	se.sandbox().Close() // its slot goes back to the budget
	se.lease.Store(nil)
	se.closeProxy()
	se.paused = pausedCold
}

// Paused reports whether se is paused.
func (se *Session) Paused() bool {
	if !se.mu.TryLock() {
		if last := se.last.Load(); last != nil {
			return last.State == "paused"
		}
		return false
	}
	defer se.mu.Unlock()
	return se.paused != running
}

// stopExpiry stops the lifetime timer (a paused session's lifetime does
// not run) and keeps what is left of it for the resume: all of it for a
// session paused because it ran out.
func (se *Session) stopExpiry(atTimeout bool) {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	if se.expiry != nil {
		se.expiry.Stop()
	}
	switch d := se.deadline.Load(); {
	case atTimeout:
		se.leftAtPause = se.lifetime
	case d != 0:
		se.leftAtPause = max(time.Until(time.Unix(0, d)), time.Second)
	}
}

// lockCtx takes se's run lock, or gives up when ctx ends first (a run in
// progress may hold it until its timeout).
func lockCtx(ctx context.Context, se *Session) error {
	for !se.mu.TryLock() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// pauseAtTimeout pauses a session whose lifetime ran out and whose
// timeout pauses it (E2B's autoPause), with its memory and its commands
// or, without keepMemory, its files only. A session that cannot pause ends.
func (t *Table) pauseAtTimeout(se *Session, keepMemory bool) {
	if _, err := t.pause(context.Background(), se, keepMemory, true); err != nil {
		t.log.Warn("session reached its lifetime and could not pause: closing it", "session", se.id, "owner", se.owner, "err", err)
		t.Drop(se)
		return
	}
	t.log.Info("session reached its lifetime: paused", "session", se.id, "owner", se.owner)
}

// freeze pauses the sandboxes of the session's running commands, and
// those that start until thaw; on a failure it thaws those it paused.
func (se *Session) freeze() error {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	se.frozen = true
	for _, cs := range se.commands {
		if cs.lease == nil {
			continue // not started yet: Attach pauses it
		}
		if err := cs.lease.Pause(); err != nil && !errors.Is(err, fleet.ErrEnded) {
			se.thawLocked()
			return fmt.Errorf("a command's sandbox: %v", err)
		}
	}
	return nil
}

// thaw resumes the sandboxes of the session's commands.
func (se *Session) thaw() {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	se.thawLocked()
}

func (se *Session) thawLocked() {
	se.frozen = false
	for _, cs := range se.commands {
		if cs.lease != nil {
			_ = cs.lease.Resume() // one that ended meanwhile has nothing to resume
		}
	}
}

// endCommands cancels the session's commands and waits for them to end;
// call with mu (commands never take it).
func (se *Session) endCommands() {
	se.lifeMu.Lock()
	for cancel := range se.commands {
		(*cancel)()
	}
	se.lifeMu.Unlock()
	se.cmdsDone.Wait()
}
