package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// conn is one session with a server.
type conn struct {
	cs    *mcp.ClientSession
	proc  Stdio           // stdio only
	httpT *http.Transport // http only
	done  chan struct{}   // closed when the session has ended
	once  sync.Once
}

func (c *conn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// close ends the session. Gracefully, a stdio server first gets the time
// to exit by itself (the manager is closing); otherwise it is killed at
// once (its connection is being replaced). Its process group is killed
// in any case.
func (c *conn) close(graceful bool) {
	c.once.Do(func() {
		if c.proc != nil && !graceful {
			c.proc.Stop(false)
		}
		if c.cs != nil {
			_ = c.cs.Close()
		}
		if c.proc != nil && graceful {
			c.proc.Stop(true)
		}
		if c.httpT != nil {
			c.httpT.CloseIdleConnections()
		}
	})
}

// startDial starts a dial unless one is under way; s.mu is held.
func (s *server) startDial() chan struct{} {
	if s.dialing == nil {
		s.dialing = make(chan struct{})
		s.m.wg.Add(1)
		go s.runDial(s.dialing)
	}
	return s.dialing
}

func (s *server) runDial(done chan struct{}) {
	defer s.m.wg.Done()
	c, err := s.dial()
	s.mu.Lock()
	s.dialing = nil
	closed := s.closed
	switch {
	case closed:
	case err != nil:
		s.lastErr = err
	default:
		s.conn, s.lastErr, s.listErr = c, nil, nil
	}
	close(done)
	s.mu.Unlock()
	switch {
	case closed && c != nil:
		c.close(false)
	case err != nil && !closed:
		s.log.Warn("upstream: cannot connect", "error", s.errorf("%w", err).Error())
	case err == nil && !closed:
		s.log.Info("upstream: connected", "transport", s.cfg.Transport())
	}
}

// dial connects a new session. It is bounded by dialTimeout and by Close,
// not by any one caller: callers that give up leave it to finish for the
// others.
func (s *server) dial() (*conn, error) {
	ctx, cancel := context.WithTimeout(s.m.ctx, dialTimeout)
	defer cancel()
	c := &conn{done: make(chan struct{})}
	client := mcp.NewClient(clientInfo, &mcp.ClientOptions{
		Logger: s.log,
		// No roots, sampling or elicitation: the upstream gets nothing of ours.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			s.mu.Lock()
			s.listGen++
			s.mu.Unlock()
			s.log.Debug("upstream: tool list changed")
		},
	})
	var t mcp.Transport
	if s.cfg.URL != "" {
		var hc *http.Client
		hc, c.httpT = newHTTPClient(s.cfg)
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: hc}
	} else {
		p, err := s.m.launch(ctx, s.name, s.cfg, s.log)
		if err != nil {
			return nil, fmt.Errorf("starting %s: %w", s.cfg.Command, err)
		}
		c.proc = p
		t = &mcp.IOTransport{Reader: p.Stdout(), Writer: p.Stdin()}
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		c.close(false)
		if c.proc != nil {
			if how := c.proc.ExitDescription(); how != "" {
				err = fmt.Errorf("%w (the server %s)", err, how)
			}
			if tail := c.proc.StderrTail(); tail != "" {
				s.log.Warn("upstream: its last stderr lines", "stderr", tail)
			}
		}
		return nil, err
	}
	c.cs = cs
	// runDial, our caller, is counted in wg, so this Add is safe.
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		err := cs.Wait()
		close(c.done)
		s.lost(c, err)
	}()
	return c, nil
}

// lost forgets a connection whose session has ended and cleans it up.
func (s *server) lost(c *conn, err error) {
	s.mu.Lock()
	current := s.conn == c
	s.mu.Unlock()
	// Closed first: a stdio server's exit status is known once it is reaped.
	c.close(false)
	if !current {
		return
	}
	if err == nil {
		err = errors.New("the server ended the session")
	}
	if c.proc != nil {
		if how := c.proc.ExitDescription(); how != "" {
			err = fmt.Errorf("%w (the server %s)", err, how)
		}
	}
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
		s.lastErr = fmt.Errorf("connection lost: %w", err)
	}
	s.mu.Unlock()
	s.log.Warn("upstream: connection lost", "error", s.errorf("%w", err).Error())
	if c.proc != nil {
		if tail := c.proc.StderrTail(); tail != "" {
			s.log.Warn("upstream: its last stderr lines", "stderr", tail)
		}
	}
}

// drop replaces a connection found broken by a request: it is forgotten
// at once and closed in the background.
func (s *server) drop(c *conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == c {
		s.conn = nil
		s.lastErr = fmt.Errorf("connection broken: %w", err)
		s.log.Warn("upstream: connection broken, reconnecting", "error", s.errorf("%w", err).Error())
	}
	if !s.closed {
		s.m.wg.Add(1)
		go func() {
			defer s.m.wg.Done()
			c.close(false)
		}()
	}
}

// connection returns the live connection, making up to attempts dials
// (joining one under way) with a backoff between them.
func (s *server) connection(ctx context.Context, attempts int) (*conn, error) {
	if s.invalid != nil {
		return nil, s.unavailable(s.invalid)
	}
	var err error
	for i := range attempts {
		if i > 0 {
			t := time.NewTimer(dialBackoff << (i - 1))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, s.unavailable(err)
			case <-t.C:
			}
		}
		var c *conn
		if c, err = s.dialOnce(ctx); c != nil {
			return c, nil
		}
		if ctx.Err() != nil || errors.Is(err, errClosed) {
			break
		}
	}
	return nil, s.unavailable(err)
}

func (s *server) dialOnce(ctx context.Context) (*conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if c := s.conn; c != nil && c.alive() {
		s.mu.Unlock()
		return c, nil
	}
	done := s.startDial()
	s.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errClosed
	case s.conn != nil && s.conn.alive():
		return s.conn, nil
	case s.lastErr != nil:
		return nil, s.lastErr
	}
	return nil, errors.New("connection lost right after connecting")
}

// JSON-RPC codes the go-sdk uses for its own, local failures: they are
// wrapped like a server's answer but mean the request went nowhere.
const (
	codeClientClosing = -32003
	codeServerClosing = -32004
	codeRejected      = -32005 // by the transport: HTTP failed, 5xx, ...
)

// transportFailure tells a broken connection from an answer: a JSON-RPC
// error from the server leaves the session usable.
func transportFailure(err error) bool {
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) {
		return true
	}
	return !serverAnswered(err)
}

// serverAnswered reports whether err's tree holds a JSON-RPC error that
// came from the server.
func serverAnswered(err error) bool {
	if werr, ok := err.(*jsonrpc.Error); ok {
		switch werr.Code {
		case codeClientClosing, codeServerClosing, codeRejected:
		default:
			return true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if next := u.Unwrap(); next != nil {
			return serverAnswered(next)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if serverAnswered(e) {
				return true
			}
		}
	}
	return false
}
