package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Errors that Manager's methods wrap.
var (
	ErrUnknownServer = errors.New("unknown upstream server")
	ErrUnknownTool   = errors.New("unknown tool")
	// ErrUnavailable: the server could not be reached, or its connection
	// was lost and reconnecting failed; the wrapped cause says why.
	ErrUnavailable = errors.New("upstream unavailable")
)

// Tool is one tool of an upstream server.
type Tool struct {
	Server       string // the upstream's name in Config
	Name         string // the tool's own name
	Description  string
	InputSchema  map[string]any // JSON schema of the arguments (an object)
	OutputSchema map[string]any // JSON schema of Result.Structured; may be nil
}

// QualifiedName is "server.tool".
func (t Tool) QualifiedName() string { return t.Server + "." + t.Name }

// Result is what a tool call gave.
type Result struct {
	Structured any    // structuredContent, when the tool gave one
	Text       string // the text content items, joined by "\n"
	IsError    bool   // the tool reported an error (its message is in Text)
}

// ServerStatus describes one upstream.
type ServerStatus struct {
	Name      string
	Transport string // "stdio" or "http"
	Connected bool
	Tools     int    // exposed tools as last listed
	Error     string // why it is not connected, or why listing failed
}

// Reconnecting: a call dials at most dialAttempts times, waiting
// dialBackoff, then twice that, in between; one dial may take dialTimeout
// (an npx upstream may be downloading itself).
var (
	dialAttempts = 3
	dialBackoff  = 100 * time.Millisecond
	dialTimeout  = 60 * time.Second
)

var clientInfo = &mcp.Implementation{Name: "codecage", Title: "codecage code mode", Version: "0.1.0"}

var errClosed = errors.New("upstream manager closed")

// Manager holds the connections to the upstream servers. Its methods are
// safe for concurrent use.
type Manager struct {
	log     *slog.Logger
	ctx     context.Context // cancelled by Close: ends dials and calls
	cancel  context.CancelFunc
	servers map[string]*server
	names   []string // sorted

	// wg counts the goroutines Close waits for: dials, session watchers,
	// background closes. Add is only called while a server is not closed
	// (under its mu) or from a goroutine wg already counts.
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// NewManager starts connecting to every server in the background and
// returns at once; a server that is not connected yet is dialled on demand.
// A server whose configuration does not validate is kept, never dialled,
// and its status says why.
func NewManager(cfg Config, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{log: log, ctx: ctx, cancel: cancel, servers: map[string]*server{}}
	for name, sc := range cfg.Servers {
		s := &server{m: m, name: name, cfg: sc, log: log.With("upstream", name), listing: make(chan struct{}, 1)}
		if err := validateServer(name, sc); err != nil {
			s.invalid = fmt.Errorf("invalid configuration: %w", err)
		} else if sc.URL != "" {
			// Errors quote the URL, whose query or password may be a key.
			u, _ := url.Parse(sc.URL)
			var pairs []string
			if u.RawQuery != "" {
				pairs = append(pairs, u.RawQuery, "…")
			}
			if pw, ok := u.User.Password(); ok && pw != "" {
				pairs = append(pairs, pw, "xxxxx")
			}
			if pairs != nil {
				s.redact = strings.NewReplacer(pairs...)
			}
		}
		m.servers[name] = s
		m.names = append(m.names, name)
	}
	slices.Sort(m.names)
	for _, name := range m.names {
		if s := m.servers[name]; s.invalid == nil {
			s.mu.Lock()
			s.startDial()
			s.mu.Unlock()
		}
	}
	return m
}

// link returns ctx, also cancelled when the manager closes.
func (m *Manager) link(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

func (m *Manager) server(name string) (*server, error) {
	s, ok := m.servers[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownServer, name)
	}
	return s, nil
}

// Tools lists the exposed tools of every reachable server, sorted by
// qualified name. Servers that cannot be reached or listed (within their
// call timeout) are left out; Status says why. Lists are cached per connection and fetched again after
// a reconnect or a tools/list_changed notification. The schemas are shared:
// callers must not modify them.
func (m *Manager) Tools(ctx context.Context) ([]Tool, error) {
	ctx, cancel := m.link(ctx)
	defer cancel()
	lists := make([][]Tool, len(m.names))
	var wg sync.WaitGroup
	for i, name := range m.names {
		s := m.servers[name]
		wg.Go(func() {
			// One dial only, and no longer than a call may take: one dead
			// or hanging server must not hold up the others' tools.
			ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout())
			defer cancel()
			lists[i], _ = s.toolList(ctx, 1, false)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		if m.ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, errClosed)
		}
		return nil, err
	}
	var all []Tool
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortFunc(all, func(a, b Tool) int { return strings.Compare(a.QualifiedName(), b.QualifiedName()) })
	return all, nil
}

// Tool returns one exposed tool of a server.
func (m *Manager) Tool(ctx context.Context, server, name string) (Tool, error) {
	s, err := m.server(server)
	if err != nil {
		return Tool{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout())
	defer cancel()
	ctx, unlink := m.link(ctx)
	defer unlink()
	return s.tool(ctx, name)
}

// Call calls a tool with the server's call timeout (which covers dialling
// too). A tool that reports an error gives a Result with IsError, not an
// error. If the connection turns out to be broken, Call reconnects and
// sends the call once more; a call that reached the server before its
// connection broke may so run twice. Errors wrap ErrUnknownServer,
// ErrUnknownTool, ErrUnavailable, or context.DeadlineExceeded when the call
// timed out; an error the server answered with (such as invalid arguments)
// is wrapped as it is, as a *jsonrpc.Error.
func (m *Manager) Call(ctx context.Context, server, tool string, args map[string]any) (Result, error) {
	s, err := m.server(server)
	if err != nil {
		return Result{}, err
	}
	if args == nil {
		args = map[string]any{}
	}
	// Arguments that cannot be sent are the caller's mistake; finding out
	// in the transport would look like a broken connection.
	if _, err := json.Marshal(args); err != nil {
		return Result{}, fmt.Errorf("upstream %s: tool %s: arguments: %w", s.name, tool, err)
	}
	timeout := s.cfg.timeout()
	callCtx, cancelTimeout := context.WithTimeout(ctx, timeout)
	defer cancelTimeout()
	callCtx, cancel := m.link(callCtx)
	defer cancel()

	res, err := s.call(callCtx, tool, args)
	if err != nil && callCtx.Err() != nil {
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("upstream %s: tool %s: %w", s.name, tool, ctx.Err())
		case m.ctx.Err() != nil:
			err = fmt.Errorf("%w: %s: %w", ErrUnavailable, s.name, errClosed)
		default:
			err = fmt.Errorf("upstream %s: tool %s: no result within %v: %w", s.name, tool, timeout, context.DeadlineExceeded)
		}
	}
	return res, err
}

// Status describes every server, sorted by name.
func (m *Manager) Status() []ServerStatus {
	out := make([]ServerStatus, 0, len(m.names))
	for _, name := range m.names {
		out = append(out, m.servers[name].status())
	}
	return out
}

// Close ends every session and every stdio server with all its process
// group, waits for them, and fails calls still under way. The Manager is
// unusable afterwards. It always returns nil (it is an io.Closer).
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.cancel()
		var wg sync.WaitGroup
		for _, s := range m.servers {
			s.mu.Lock()
			s.closed = true
			c := s.conn
			s.conn = nil
			s.mu.Unlock()
			if c != nil {
				wg.Go(func() { c.close(true) })
			}
		}
		wg.Wait()
		m.wg.Wait()
	})
	return nil
}

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

// conn is one session with a server.
type conn struct {
	cs    *mcp.ClientSession
	proc  *process        // stdio only
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
			c.proc.stop(false)
		}
		if c.cs != nil {
			_ = c.cs.Close()
		}
		if c.proc != nil && graceful {
			c.proc.stop(true)
		}
		if c.httpT != nil {
			c.httpT.CloseIdleConnections()
		}
	})
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
		p, err := startProcess(s.name, s.cfg, s.log)
		if err != nil {
			return nil, fmt.Errorf("starting %s: %w", s.cfg.Command, err)
		}
		c.proc = p
		t = &mcp.IOTransport{Reader: p.stdout, Writer: p.stdin}
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		c.close(false)
		if c.proc != nil {
			if how := c.proc.exitDescription(); how != "" {
				err = fmt.Errorf("%w (the server %s)", err, how)
			}
			if tail := c.proc.stderrTail(); tail != "" {
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
		if how := c.proc.exitDescription(); how != "" {
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
		if tail := c.proc.stderrTail(); tail != "" {
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

// cached returns the tool list of c if it is current.
func (s *server) cached(c *conn) ([]Tool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c != nil && s.toolsConn == c && s.toolsGen == s.listGen {
		return s.tools, true
	}
	return nil, false
}

// toolList returns the server's exposed tools, listing them if the cache
// is not current (or fresh is set), reconnecting once if the connection
// turns out broken.
func (s *server) toolList(ctx context.Context, attempts int, fresh bool) ([]Tool, error) {
	retried := false
	for {
		c, err := s.connection(ctx, attempts)
		if err != nil {
			return nil, err
		}
		if ts, ok := s.cached(c); ok && !fresh {
			return ts, nil
		}
		select {
		case s.listing <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if ts, ok := s.cached(c); ok && !fresh {
			<-s.listing
			return ts, nil
		}
		s.mu.Lock()
		gen := s.listGen
		s.mu.Unlock()
		ts, err := s.fetchTools(ctx, c)
		<-s.listing
		if err == nil {
			s.mu.Lock()
			if s.conn == c {
				s.tools, s.toolsConn, s.toolsGen, s.listErr = ts, c, gen, nil
			}
			s.mu.Unlock()
			return ts, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !transportFailure(err) {
			s.mu.Lock()
			s.listErr = fmt.Errorf("listing tools: %w", err)
			s.mu.Unlock()
			return nil, s.errorf("upstream %s: listing tools: %w", s.name, err)
		}
		s.drop(c, err)
		if retried {
			return nil, s.unavailable(err)
		}
		retried, fresh = true, false
	}
}

func (s *server) fetchTools(ctx context.Context, c *conn) ([]Tool, error) {
	var out []Tool
	seen := map[string]bool{}
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		seen[t.Name] = true
		if !s.cfg.exposes(t.Name) {
			continue
		}
		in, _ := t.InputSchema.(map[string]any)
		if in == nil {
			in = map[string]any{"type": "object"}
		}
		outSchema, _ := t.OutputSchema.(map[string]any)
		out = append(out, Tool{Server: s.name, Name: t.Name, Description: t.Description, InputSchema: in, OutputSchema: outSchema})
	}
	for _, name := range s.cfg.Tools {
		if !seen[name] {
			s.log.Warn("upstream: configured tool not offered by the server", "tool", name)
		}
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// tool finds an exposed tool, listing afresh once if the cached list lacks
// it (a server need not announce changes).
func (s *server) tool(ctx context.Context, name string) (Tool, error) {
	if !s.cfg.exposes(name) {
		return Tool{}, fmt.Errorf("%w %q on upstream %s", ErrUnknownTool, name, s.name)
	}
	for _, fresh := range []bool{false, true} {
		ts, err := s.toolList(ctx, dialAttempts, fresh)
		if err != nil {
			return Tool{}, err
		}
		if i := slices.IndexFunc(ts, func(t Tool) bool { return t.Name == name }); i >= 0 {
			return ts[i], nil
		}
	}
	return Tool{}, fmt.Errorf("%w %q on upstream %s", ErrUnknownTool, name, s.name)
}

func (s *server) call(ctx context.Context, tool string, args map[string]any) (Result, error) {
	if _, err := s.tool(ctx, tool); err != nil {
		return Result{}, err
	}
	retried := false
	for {
		c, err := s.connection(ctx, dialAttempts)
		if err != nil {
			return Result{}, err
		}
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err == nil {
			return toResult(res), nil
		}
		if ctx.Err() != nil {
			return Result{}, err
		}
		if !transportFailure(err) {
			return Result{}, s.errorf("upstream %s: tool %s: %w", s.name, tool, err)
		}
		s.drop(c, err)
		if retried {
			return Result{}, s.unavailable(err)
		}
		retried = true
	}
}

func toResult(r *mcp.CallToolResult) Result {
	var texts []string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	return Result{Structured: r.StructuredContent, Text: strings.Join(texts, "\n"), IsError: r.IsError}
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
