package session

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// leases are the session's running sandboxes: its interpreter's first,
// then its commands' (each command is a sandbox of its own, with its own
// loopback).
func (se *Session) leases() []*fleet.Lease {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	var out []*fleet.Lease
	if l := se.sandbox(); l != nil {
		out = append(out, l)
	}
	for _, cs := range se.commands {
		if cs.lease != nil {
			out = append(out, cs.lease)
		}
	}
	return out
}

// DialPort connects to a server listening on port in the session: on the
// loopback of its interpreter's sandbox or of one of its running
// commands' (a server started in the background by a command). Each is
// dialed in its own network namespace; none is given a network. It fails
// with fleet.ErrPortClosed when none listens there, ErrPaused while the
// session is paused (its servers are frozen: a connection would hang).
func (se *Session) DialPort(ctx context.Context, port int) (net.Conn, error) {
	se.lifeMu.Lock()
	frozen, dropped := se.frozen, se.dropped
	se.lifeMu.Unlock()
	switch {
	case dropped:
		return nil, fmt.Errorf("%w: session %s is closed", ErrNotFound, se.id)
	case frozen:
		return nil, fmt.Errorf("%w: session %s", ErrPaused, se.id)
	}
	var errs []error
	for _, l := range se.leases() {
		c, err := l.DialPort(ctx, port)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, fleet.ErrPortsUnsupported) || ctx.Err() != nil {
			return nil, err
		}
		if !errors.Is(err, fleet.ErrPortClosed) && !errors.Is(err, fleet.ErrEnded) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return nil, fmt.Errorf("%w: port %d of session %s", fleet.ErrPortClosed, port, se.id)
}

// Usage is what the session's sandboxes (interpreter and running
// commands) use now, together.
func (se *Session) Usage() fleet.Usage {
	var u fleet.Usage
	for _, l := range se.leases() {
		lu := l.Usage()
		u.CPU += lu.CPU
		u.Memory += lu.Memory
	}
	return u
}

// Limits are the limits of the session's interpreter sandbox.
func (se *Session) Limits() fleet.Limits { return se.limits }

// usageMark is a session's previous metrics sample: when, and its CPU
// time then.
type usageMark struct {
	at  time.Time
	cpu time.Duration
}

// CPUSinceLastSample records cpu (the session's CPU time now) as its
// latest sample, and returns the CPU time and the wall time since the
// previous one (since the session started, the first time). The CPU time
// of commands that ended meanwhile is no longer counted: it is 0 then,
// not negative.
func (se *Session) CPUSinceLastSample(now time.Time, cpu time.Duration) (used, wall time.Duration) {
	prev := se.mark.Swap(&usageMark{at: now, cpu: cpu})
	if prev == nil {
		prev = &usageMark{at: se.created}
	}
	return max(cpu-prev.cpu, 0), now.Sub(prev.at)
}
