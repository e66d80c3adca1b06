// Package egress is the forward proxy that is a sandbox's only way out in
// the network profile. The sandbox has no interface but loopback; a relay
// inside forwards 127.0.0.1:3128 to a unix socket served by this proxy in
// the supervisor. It is policy, so it errs on the side of refusing:
//
//   - the destination must match the allow list (Policy);
//   - names are resolved here, once, and every address is checked: only an
//     exact entry may reach a loopback, private, link-local or otherwise
//     non-public address, and a wildcard never does;
//   - the checked address is what gets dialed, by IP, never the name again,
//     so a DNS answer that changes between check and use (rebinding) cannot
//     redirect the connection.
//
// HTTPS goes through CONNECT tunnels; the proxy cannot see inside them, so
// the TLS server name may differ from the CONNECT host (domain fronting).
// What the policy really bounds is the set of addresses reached.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecage/codecage/internal/bounded"
)

// Limits that are not options: they guard the proxy itself, not policy.
const (
	// maxHeaderBytes caps the request line and headers of a request.
	maxHeaderBytes = 64 << 10
	// readHeaderTimeout bounds how long a client may take to send its
	// headers, so slow clients (slowloris) cannot pin connections.
	readHeaderTimeout = 10 * time.Second
	// maxResponseHeaderBytes caps what an upstream may send as headers.
	maxResponseHeaderBytes = 1 << 20
	// busyGrace bounds the time spent answering a connection over MaxConns.
	busyGrace = 2 * time.Second
)

// Resolver looks up the addresses of a host name. *net.Resolver satisfies
// it; tests inject fakes.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options tune a Proxy. The zero value is usable.
type Options struct {
	// Logger receives one line per decision (sandbox id, method, host,
	// port, allowed, reason, dialed address) plus upstream failures. Nil
	// means slog.Default().
	Logger *slog.Logger
	// Resolver resolves destination names. Nil means net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds name resolution and the upstream dial, each.
	// Default 10s.
	DialTimeout time.Duration
	// IdleTimeout ends a tunnel or an upstream exchange after this long
	// without traffic in either direction, and closes idle keep-alive
	// client connections. Default 60s.
	IdleTimeout time.Duration
	// MaxConns caps concurrent client connections; connections beyond it
	// are answered 503 and closed. Default 64.
	MaxConns int
	// OnDecision, if set, is called once per decision, after it is logged
	// (metrics, audit). It runs on the request's goroutine, so it must be
	// quick, and it must not call Close.
	OnDecision func(Decision)
	// Label identifies the sandbox or execution in logs.
	Label string
	// Rules are the sandbox's own, within the policy (SetRules changes
	// them). They must Check; New ignores rules that do not.
	Rules NetworkRules
	// Authority, if set, lets the proxy open HTTPS tunnels to the hosts
	// of its credentials (SetCredentials) to add them; without one,
	// every tunnel is spliced unopened.
	Authority *Authority
	// UpstreamRoots verify the servers of opened tunnels; nil is the
	// host's roots.
	UpstreamRoots *x509.CertPool
	// OnCredential, if set, hears of each request a credential was added
	// to (its name, never its value).
	OnCredential func(CredentialUse)
	// OnClose, if set, runs once Close has ended everything.
	OnClose func()
	// Operator are bindings every SetBindings keeps beside the sandbox's
	// own, their secrets from OperatorSecrets (the operator's).
	Operator        []Binding
	OperatorSecrets SecretFunc
}

// Decision is the outcome of the destination check of one request. It is
// logged for every request the proxy answers itself (malformed requests
// that the HTTP layer rejects before routing, such as oversized headers,
// produce none).
type Decision struct {
	// Method is the request method (CONNECT for tunnels).
	Method string
	// Host is the normalized destination host: lowercase name or IP.
	Host string
	// Port is the destination port (0 if the request had none usable).
	Port int
	// Allowed reports whether the request passed every check and the
	// proxy went on to dial Addr.
	Allowed bool
	// Reason says why, in words fit for the sandboxed program's user.
	Reason string
	// Addr is the ip:port to be dialed; empty when refused.
	Addr string
}

// Proxy is an HTTP(S) forward proxy enforcing a Policy. Create it with New;
// it may Serve several listeners at once, and Close ends them all.
type Proxy struct {
	entries   []entry
	rules     atomic.Pointer[compiledRules] // nil: none
	creds     atomic.Pointer[credentialSet] // nil: none
	authority *Authority
	// upstreamRoots verify opened tunnels' servers (nil: the host's).
	upstreamRoots *x509.CertPool
	onCredential  func(CredentialUse)
	onClose       func()
	// operator are the bindings the sandbox always has (Options.Operator).
	operator        []Binding
	operatorSecrets SecretFunc
	log             *slog.Logger
	resolver        Resolver
	dialTimeout     time.Duration
	idleTimeout     time.Duration
	maxConns        int
	onDecision      func(Decision)
	label           string
	// refusedLog lets the first maxLoggedRefusals refusals into the log:
	// the sandboxed program can make as many as it likes, and Close logs
	// how many more there were.
	refusedLog *bounded.Quota
	// dial opens upstream connections; tests replace it to observe which
	// address is dialed without needing a route to it.
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	srv    *http.Server
	ctx    context.Context // cancelled by Close: aborts lookups, dials, round trips
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	conns   map[*trackedConn]struct{} // every live client and upstream connection
	clients int                       // live client connections, against maxConns
	// wg counts handlers and the goroutines this package starts. Adds
	// happen under mu while !closed, or from a goroutine already counted,
	// so Close can Wait without racing an Add from zero.
	wg sync.WaitGroup
}

// New returns a Proxy enforcing p. Entries of p that do not parse (a
// Policy built by hand rather than by ParsePolicy) are logged and ignored:
// the proxy fails closed rather than guess.
func New(p Policy, opts Options) *Proxy {
	px := &Proxy{
		log:             opts.Logger,
		resolver:        opts.Resolver,
		dialTimeout:     opts.DialTimeout,
		idleTimeout:     opts.IdleTimeout,
		maxConns:        opts.MaxConns,
		onDecision:      opts.OnDecision,
		label:           opts.Label,
		authority:       opts.Authority,
		upstreamRoots:   opts.UpstreamRoots,
		onCredential:    opts.OnCredential,
		onClose:         opts.OnClose,
		operator:        opts.Operator,
		operatorSecrets: opts.OperatorSecrets,
		refusedLog:      bounded.NewQuota(maxLoggedRefusals),
		conns:           make(map[*trackedConn]struct{}),
	}
	if px.log == nil {
		px.log = slog.Default()
	}
	if px.resolver == nil {
		px.resolver = net.DefaultResolver
	}
	if px.dialTimeout <= 0 {
		px.dialTimeout = 10 * time.Second
	}
	if px.idleTimeout <= 0 {
		px.idleTimeout = 60 * time.Second
	}
	if px.maxConns <= 0 {
		px.maxConns = 64
	}
	px.dial = (&net.Dialer{}).DialContext

	var bad []error
	px.entries, bad = compile(p)
	for _, err := range bad {
		px.log.Warn("egress: ignoring malformed allow entry", "sandbox", px.label, "error", err)
	}

	if err := px.SetRules(opts.Rules); err != nil {
		px.log.Warn("egress: ignoring the sandbox's rules", "sandbox", px.label, "error", err)
	}
	if err := px.SetBindings(nil, nil); err != nil {
		px.log.Warn("egress: ignoring the operator's credentials", "sandbox", px.label, "error", err)
	}

	px.ctx, px.cancel = context.WithCancel(context.Background())
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	px.srv = &http.Server{
		Handler:           http.HandlerFunc(px.serveHTTP),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       px.idleTimeout,
		// net/http reads up to MaxHeaderBytes plus 4 KiB of slack before
		// answering 431; subtract it so the real cap is maxHeaderBytes.
		MaxHeaderBytes: maxHeaderBytes - 4096,
		BaseContext:    func(net.Listener) context.Context { return px.ctx },
		// Otherwise "OPTIONS *" is answered by net/http without reaching
		// the handler, and so without a decision being logged.
		DisableGeneralOptionsHandler: true,
		Protocols:                    protocols,
		ErrorLog:                     slog.NewLogLogger(px.log.With("sandbox", px.label).Handler(), slog.LevelDebug),
	}
	return px
}

// SetRules replaces the sandbox's rules; connections admitted from now on
// are checked against them (tunnels already open stay open). Rules that do
// not Check leave the old ones in place.
func (p *Proxy) SetRules(r NetworkRules) error {
	if r.IsZero() {
		p.rules.Store(nil)
		return nil
	}
	c, err := r.compile()
	if err != nil {
		return err
	}
	p.rules.Store(c)
	return nil
}

// Serve accepts connections on l and serves them until l or the Proxy is
// closed. It returns nil when it ends because of Close (or because l was
// closed), and the accept error otherwise. Serve after Close closes l and
// returns nil at once.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		l.Close()
		return nil
	}
	err := p.srv.Serve(&listener{Listener: l, p: p})
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Close closes every listener being served and every live connection,
// tunnels included, and waits for the proxy's goroutines to finish. It is
// safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	conns := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()

	p.cancel()
	err := p.srv.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
	if more := p.refusedLog.More(); more > 0 {
		p.log.Warn("egress: refusals not logged one by one", "sandbox", p.label, "more", more)
	}
	if p.onClose != nil {
		p.onClose()
	}
	if errors.Is(err, net.ErrClosed) {
		// The caller closed a listener itself; nothing went wrong.
		err = nil
	}
	return err
}

// enter registers a handler with wg, unless the proxy is closing.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// serveHTTP routes a request: CONNECT opens a tunnel, anything else is a
// plain-HTTP proxy request.
func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		w.Header().Set("Connection", "close")
		http.Error(w, "codecage egress: shutting down", http.StatusServiceUnavailable)
		return
	}
	defer p.wg.Done()
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r)
		return
	}
	p.serveForward(w, r)
}
