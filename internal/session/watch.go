package session

import (
	"context"
	"errors"
	"fmt"
)

// ErrTooManyWatches: the session has SANDBOX_SESSION_MAX_WATCHES open.
var ErrTooManyWatches = errors.New("too many directory watches")

// Directory watches on a session's workspace run on the host, beside its
// sandbox, as its commands do; they end when the session closes, pauses
// or is parked (a paused or parked machine has no daemon to watch with).

// StartWatch registers a watch of se's workspace that stop ends; at most
// limit (SANDBOX_SESSION_MAX_WATCHES) at once. It returns the workspace's
// host directory, and done, to call once the watch has ended (stop may
// be called by then; it must be safe to call again). stop is never
// called under the session's locks.
func (t *Table) StartWatch(ctx context.Context, se *Session, limit int, stop func()) (string, func(), error) {
	if se.mu.TryLock() {
		// As a command does, a watch finds the session running.
		err := t.wake(ctx, se)
		se.mu.Unlock()
		if err != nil {
			return "", nil, err
		}
	}
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	switch {
	case se.dropped:
		return "", nil, fmt.Errorf("%w: session %s is closed", ErrNotFound, se.id)
	case se.watchesOff:
		return "", nil, fmt.Errorf("%w: session %s is paused", ErrPaused, se.id)
	case se.dir == "":
		return "", nil, fmt.Errorf("%w: session %s is still starting; try again", ErrEnded, se.id)
	case len(se.watches) >= limit:
		return "", nil, fmt.Errorf("%w: session %s has %d open, its limit (SANDBOX_SESSION_MAX_WATCHES); stop one first", ErrTooManyWatches, se.id, len(se.watches))
	}
	if se.watches == nil {
		se.watches = map[*func()]struct{}{}
	}
	key := &stop
	se.watches[key] = struct{}{}
	done := func() {
		se.lifeMu.Lock()
		delete(se.watches, key)
		se.lifeMu.Unlock()
	}
	return se.dir, done, nil
}

// Watches is how many directory watches se has open.
func (se *Session) Watches() int {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	return len(se.watches)
}

// endWatches stops se's watches; off: and refuses new ones until it is
// called again with off false (a resume).
func (se *Session) endWatches(off bool) {
	se.lifeMu.Lock()
	se.watchesOff = off
	stops := se.takeWatchesLocked()
	se.lifeMu.Unlock()
	stopAll(stops)
}

// takeWatchesLocked empties se's watches, for the caller to stop once it
// has let go of lifeMu; call with lifeMu.
func (se *Session) takeWatchesLocked() []func() {
	stops := make([]func(), 0, len(se.watches))
	for stop := range se.watches {
		stops = append(stops, *stop)
	}
	clear(se.watches)
	return stops
}

func stopAll(stops []func()) {
	for _, stop := range stops {
		stop()
	}
}
