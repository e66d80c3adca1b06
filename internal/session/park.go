package session

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Parking a session: it is written out, as a snapshot is, and ends here:
// its slot, its memory and its workspace are freed. The caller keeps the
// copy (the service: in the snapshot store, under the session's id) and
// brings the session back from it with CreateFrom (RestoreFrom.Back):
// after a pause in memory that lasted too long, after a restart of the
// server, or on another replica after this one drained.

// Parked is what a parked session was, besides its capture: what brings
// it back as the same session.
type Parked struct {
	Capture
	ID      string
	Owner   string
	Request Request
	Created time.Time
	Runs    int
	// PausedAt is when it was paused; zero when it was running (parked
	// as its server stopped): it then resumes on the next request
	// whatever its resume choice, since no one paused it.
	PausedAt time.Time
	// Left is what was left of its lifetime (0: it had none set).
	Left time.Duration
	// Cold: it was paused without its memory; nothing of its interpreter
	// was saved, and it comes back with a fresh one.
	Cold bool
}

// Park writes se out through to, hands what it saved to keep, and, when
// keep succeeds, ends se here. A request in progress is waited for (up
// to ctx). When the capture or keep fails, se goes on as it was. pause:
// the park pauses a running session (its owner asked): it is parked as
// paused, not as running.
func (t *Table) Park(ctx context.Context, se *Session, to SnapshotTo, pause bool, keep func(Parked) error) error {
	if err := lockCtx(ctx, se); err != nil {
		return err
	}
	if err := t.parkLocked(ctx, se, to, pause, keep); err != nil {
		se.mu.Unlock()
		return err
	}
	// Out of the table before the run lock goes: the next request finds
	// the parked copy, not this session.
	se.ended = "parked"
	gone := make(chan struct{})
	t.mu.Lock()
	if t.byID[se.id] == se {
		delete(t.byID, se.id)
	}
	if t.ending == nil {
		t.ending = map[string]chan struct{}{}
	}
	t.ending[se.id] = gone
	t.mu.Unlock()
	se.mu.Unlock()
	t.Drop(se)
	t.mu.Lock()
	if t.ending[se.id] == gone {
		delete(t.ending, se.id)
	}
	t.mu.Unlock()
	close(gone)
	return nil
}

// parkLocked captures se and hands it to keep; call with se.mu.
func (t *Table) parkLocked(ctx context.Context, se *Session, to SnapshotTo, pause bool, keep func(Parked) error) error {
	if se.ended != "" {
		return fmt.Errorf("%w: %s %s", ErrEnded, se.id, se.ended)
	}
	p := Parked{ID: se.id, Owner: se.owner, Request: se.Request(), Created: se.created, Runs: se.runs, PausedAt: se.pausedAt}
	switch se.paused {
	case pausedCold:
		p.Cold, p.Left = true, se.leftAtPause
		p.Capture = Capture{Backend: se.backend, Installed: slices.Clone(se.installed), Log: se.log.read(LogQuery{})}
		if err := to.files(se); err != nil {
			return err
		}
		return keep(p)
	case pausedAlive:
		p.Left = se.leftAtPause
		// Its state is written by its running interpreter, then it
		// stands still again until it ends or stays.
		if err := se.sandbox().Resume(); err != nil {
			return fmt.Errorf("%w: resume to park: %v", ErrEnded, err)
		}
		se.thaw()
		defer func() {
			if se.ended == "" {
				_ = se.freeze()
				_ = se.sandbox().Pause()
			}
		}()
	default:
		if d := se.deadline.Load(); d != 0 {
			p.Left = max(time.Until(time.Unix(0, d)), time.Second)
		}
		if pause {
			p.PausedAt = time.Now()
		}
	}
	c, err := t.capture(ctx, se, to)
	if err != nil {
		return err
	}
	se.lifeMu.Lock()
	if n := len(se.commands); n > 0 {
		// Commands run in sandboxes of their own, which a park ends.
		c.NotSaved = append(c.NotSaved, fmt.Sprintf("%d running command(s) (a parked session's commands end)", n))
	}
	se.lifeMu.Unlock()
	p.Capture = c
	p.Log = se.log.read(LogQuery{})
	if err := keep(p); err != nil {
		return err
	}
	se.ended = "parked" // no re-pause on the way out: it is ending
	return nil
}

// Has reports whether session id is in the table (any owner's).
func (t *Table) Has(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.byID[id]
	return ok
}

// Each calls f for every session in the table (a copy of the list).
func (t *Table) Each(f func(*Session)) {
	t.mu.Lock()
	all := make([]*Session, 0, len(t.byID))
	for _, se := range t.byID {
		all = append(all, se)
	}
	t.mu.Unlock()
	for _, se := range all {
		f(se)
	}
}

// PausedSince returns when se was paused with its memory kept, or zero
// when it is not (the reaper's and the service's test for parking a
// long pause).
func (se *Session) PausedSince() (time.Time, bool) {
	if !se.mu.TryLock() {
		return time.Time{}, false
	}
	defer se.mu.Unlock()
	return se.pausedAt, se.paused == pausedAlive
}

// Owner is the session's owner.
func (se *Session) Owner() string { return se.owner }
