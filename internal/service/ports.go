package service

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// PortRequest asks for a connection to a server in a session.
type PortRequest struct {
	SessionID, Owner string
	Port             int
}

// OpenPort connects to a server that the session's code or one of its
// commands listens with on its sandbox's loopback (python3 -m
// http.server 8000). The connection is made from the host inside the
// sandbox's network namespace: the sandbox gets no network, no
// interface, no port on the host; only this connection, which the caller
// relays (under gVisor, whose loopback is in runsc's own network stack,
// the connection is a relay runsc execs inside the sandbox, with the
// session's python3). A session held by
// another replica cannot be reached from this one (a connection does not
// cross replicas): route its traffic to that replica.
func (s *Service) OpenPort(ctx context.Context, req PortRequest) (net.Conn, error) {
	if s.remote(req.SessionID) != "" && !s.sessions.Has(req.SessionID) {
		return nil, fmt.Errorf("%w: session %s is held by another replica, and a connection to its ports does not cross replicas: send its traffic there", ErrUnavailable, Quote(req.SessionID))
	}
	return do(ctx, s, opPort, call[net.Conn]{
		session: req.SessionID, owner: req.Owner,
		check: func() error {
			if err := fleet.CheckPort(req.Port); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
			}
			return nil
		},
		run: func(ctx context.Context) (net.Conn, error) {
			se, err := s.session(req.SessionID, req.Owner)
			if err != nil {
				return nil, err
			}
			c, err := se.DialPort(ctx, req.Port)
			return c, errdefs.Port(ctx, err, req.Port, req.SessionID)
		},
		// Each connection is audited: it is a way into the sandbox.
		success: func(_ net.Conn, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "port", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: port %d", req.SessionID, req.Port)}
		},
	})
}
