package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

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
	// sandboxed starts the servers that run in a sandbox of their own.
	sandboxed Launcher
}

// launch starts a stdio server: in its sandbox when it has one, else as
// a process of ours.
func (m *Manager) launch(ctx context.Context, name string, cfg ServerConfig, log *slog.Logger) (Stdio, error) {
	if cfg.Sandbox == nil {
		return startProcess(name, cfg, log)
	}
	if m.sandboxed == nil {
		return nil, errors.New("it runs in a sandbox of its own, which only a sandbox's MCP gateway starts")
	}
	return m.sandboxed(ctx, name, cfg, log)
}

// NewManager starts connecting to every server in the background and
// returns at once; a server that is not connected yet is dialled on demand.
// A server whose configuration does not validate is kept, never dialled,
// and its status says why.
func NewManager(cfg Config, log *slog.Logger) *Manager { return NewManagerWith(cfg, log, nil) }

// NewManagerWith is NewManager whose servers with a Sandbox are started by
// sandboxed (nil: such a server fails to start, saying why).
func NewManagerWith(cfg Config, log *slog.Logger, sandboxed Launcher) *Manager {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{log: log, ctx: ctx, cancel: cancel, servers: map[string]*server{}, sandboxed: sandboxed}
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
