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
// then its commands' (each command is a sandbox of its own).
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
// loopback of its network namespace, which its interpreter and its
// commands share (a server started by runCode or in the background by a
// command). Without one (gVisor), each running sandbox is tried. The
// connection is made in that namespace: the session is given no network.
// It fails with fleet.ErrPortClosed when none listens there, ErrPaused
// while the session is paused (its servers are frozen: a connection
// would hang).
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
	if ns := se.netns.Load(); ns != nil {
		c, err := ns.DialPort(ctx, port)
		if errors.Is(err, fleet.ErrPortClosed) {
			return nil, fmt.Errorf("%w: port %d of session %s", fleet.ErrPortClosed, port, se.id)
		}
		return c, err
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

// holdNetns keeps the network namespace of the session's first
// interpreter as the session's (see Session.netns). Without it (it could
// not be opened) each command keeps a namespace of its own: the session
// works, but its sandboxes do not reach each other's servers.
func (t *Table) holdNetns(se *Session, lease *fleet.Lease) {
	if se.netns.Load() != nil {
		return
	}
	ns, err := lease.NetNS()
	if err != nil {
		t.log.Warn("the session's network namespace could not be held: its commands get their own", "session", se.id, "err", err)
		return
	}
	if ns != nil {
		se.netns.Store(ns)
	}
}
