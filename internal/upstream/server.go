package upstream

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// server is one upstream and its current connection.
type server struct {
	m       *Manager
	name    string
	cfg     ServerConfig
	log     *slog.Logger
	invalid error             // a configuration error: never dialled
	redact  *strings.Replacer // removes the URL's secrets from errors; may be nil

	listing chan struct{} // a one-slot semaphore: one tools/list at a time

	mu      sync.Mutex
	closed  bool
	conn    *conn         // nil when not connected
	dialing chan struct{} // closed when the dial under way ends
	lastErr error         // why the last dial failed or the connection ended
	listErr error         // why the last listing failed on a live connection

	tools     []Tool // exposed, sorted by name
	toolsConn *conn  // the connection tools was listed on
	toolsGen  uint64 // listGen when tools was listed
	listGen   uint64 // bumped by tools/list_changed
}

// errorf makes an error for this server, with any key in its URL removed.
func (s *server) errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if s.redact == nil {
		return err
	}
	return redactedError{err: err, r: s.redact}
}

// redactedError shows err with secrets replaced, and still unwraps to it.
type redactedError struct {
	err error
	r   *strings.Replacer
}

// Error is err's message without the secrets.
func (e redactedError) Error() string { return e.r.Replace(e.err.Error()) }

// Unwrap keeps errors.Is and errors.As working through the redaction.
func (e redactedError) Unwrap() error { return e.err }

func (s *server) unavailable(cause error) error {
	return s.errorf("%w: %s: %w", ErrUnavailable, s.name, cause)
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ServerStatus{Name: s.name, Transport: s.cfg.Transport()}
	st.Connected = s.conn != nil && s.conn.alive()
	if st.Connected && s.toolsConn == s.conn {
		st.Tools = len(s.tools)
	}
	var err error
	switch {
	case s.invalid != nil:
		err = s.invalid
	case s.closed:
		err = errClosed
	case !st.Connected && s.lastErr != nil:
		err = s.lastErr
	case !st.Connected && s.dialing != nil:
		err = errors.New("connecting")
	case !st.Connected && s.conn != nil:
		err = errors.New("connection lost") // lost is cleaning it up
	case st.Connected && s.listErr != nil:
		err = s.listErr
	}
	if err != nil {
		st.Error = s.errorf("%w", err).Error()
	}
	return st
}
