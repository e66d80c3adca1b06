package session

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// A session's life: its lifetime, restarts, its end, and the reaper
// that ends idle and expired sessions.

// ExpireAfter ends se d from now, used or not (nothing when d is 0: the
// idle TTL applies). Not under se.mu: that is held while code runs, and a
// caller may move the end of a session whose code is running.
func (t *Table) ExpireAfter(se *Session, d time.Duration) {
	if d <= 0 {
		return
	}
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	se.lifetime = d
	se.deadline.Store(time.Now().Add(d).UnixNano())
	if se.expiry != nil {
		se.expiry.Reset(d)
		return
	}
	se.expiry = time.AfterFunc(d, func() {
		if time.Now().UnixNano() < se.deadline.Load() {
			return // moved meanwhile; the reset timer fires again
		}
		if se.req.OnTimeout == "pause" || se.req.OnTimeout == "pause_files" {
			t.pauseAtTimeout(se, se.req.OnTimeout == "pause")
			return
		}
		t.log.Info("session reached its lifetime", "session", se.id, "owner", se.owner)
		t.Drop(se)
	})
}

// Restart starts a fresh interpreter for a session, on the same
// workspace and the same slot of the budget.
func (t *Table) Restart(ctx context.Context, se *Session) (Info, error) {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.paused == pausedCold {
		// No sandbox to replace: the resume starts a fresh interpreter.
		if err := t.resume(ctx, se); err != nil {
			return Info{}, err
		}
		return se.info(t.cfg), nil
	}
	lease := se.sandbox()
	if lease == nil {
		return Info{}, fmt.Errorf("%w: session %s has no sandbox", ErrEnded, se.id)
	}
	se.paused, se.pausedAt = running, time.Time{} // a fresh interpreter runs
	t.addIdleCPU(se.cpu.settle(lease))
	// The same slot: a restart needs no room in the budget.
	replace := func(ctx context.Context, _ string, spec fleet.Spec) (*fleet.Lease, error) {
		return lease, lease.Replace(ctx, spec)
	}
	if err := t.start(ctx, se, replace); err != nil {
		return Info{}, err
	}
	se.Log(LevelInfo, "interpreter restarted: its variables are gone, its files kept", nil)
	return se.info(t.cfg), nil
}

// Drop ends a session: it leaves the table, its request in progress and
// its commands are canceled, then its sandbox, its slot, its proxy, its
// workspace and its uid go.
func (t *Table) Drop(se *Session) {
	t.dropping.RLock()
	defer t.dropping.RUnlock()
	t.mu.Lock()
	delete(t.byID, se.id)
	t.mu.Unlock()
	lease := se.sandbox()
	if lease != nil {
		t.addIdleCPU(se.cpu.settle(lease))
		lease.Kill(fleet.LimitCanceled) // a request in progress ends now, not at its timeout
	}
	se.lifeMu.Lock()
	if se.expiry != nil {
		se.expiry.Stop()
	}
	se.dropped = true
	for cancel := range se.commands {
		(*cancel)()
	}
	stops := se.takeWatchesLocked()
	se.lifeMu.Unlock()
	stopAll(stops)
	se.cmdsDone.Wait() // their jails hold the workspace
	se.mu.Lock()
	defer se.mu.Unlock()
	if lease != nil {
		lease.Close() // its slot goes back to the budget
	}
	se.closeProxy()
	if ns := se.netns.Swap(nil); ns != nil {
		_ = ns.Close() // no command is in it any more; a server still running keeps it
	}
	if se.dir != "" {
		removeWorkspace(se.dir)
	}
	if se.site != "" {
		removeWorkspace(se.site)
	}
	if se.root != "" {
		removeWorkspace(se.root)
	}
	if se.tmp != "" {
		removeWorkspace(se.tmp)
	}
	releaseWorkspaces(se.claim)
	se.claim = nil
	if se.uid != 0 {
		fleet.ReleaseUID(se.uid)
		se.uid = 0
	}
	if se.ended == "" {
		se.ended = "closed"
	}
}

// reap closes sessions idle past their TTL or past their lifetime.
func (t *Table) reap() {
	now := time.Now()
	t.mu.Lock()
	var expired []*Session
	for _, se := range t.byID {
		if !se.mu.TryLock() {
			continue // running a request: not idle
		}
		used := se.used
		if t := se.touched.Load(); t > used.UnixNano() {
			used = time.Unix(0, t)
		}
		se.lifeMu.Lock()
		busy := false
		for _, cs := range se.commands {
			busy = busy || !cs.daemon // a daemon runs while the session idles
		}
		se.lifeMu.Unlock()
		// A lifetime replaces the idle TTL; a paused session is not idle.
		idle := !busy && se.paused == running && now.Sub(used) > t.cfg.SessionIdleTTL && se.deadline.Load() == 0
		if idle || now.Sub(se.created) > t.cfg.SessionMaxLifetime {
			expired = append(expired, se)
		}
		se.mu.Unlock()
	}
	t.mu.Unlock()
	for _, se := range expired {
		t.log.Info("session expired", "session", se.id, "owner", se.owner)
		t.Drop(se)
	}
}

// Reaper closes idle and expired sessions until stop is closed.
func (t *Table) Reaper(stop <-chan struct{}) {
	every := min(t.cfg.SessionIdleTTL/4, time.Minute)
	tick := time.NewTicker(max(every, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			t.reap()
		case <-stop:
			return
		}
	}
}

// CloseAll ends every session (service shutdown) and waits for the drops
// in progress.
func (t *Table) CloseAll() {
	t.mu.Lock()
	var all []*Session
	for _, se := range t.byID {
		all = append(all, se)
	}
	t.mu.Unlock()
	for _, se := range all {
		t.Drop(se)
	}
	// Drops that began elsewhere (an expiry, the reaper) end before the
	// service does: their workspaces are unmounted and removed.
	t.dropping.Lock()
	t.dropping.Unlock()
}
