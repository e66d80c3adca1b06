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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
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
	entries     []entry
	log         *slog.Logger
	resolver    Resolver
	dialTimeout time.Duration
	idleTimeout time.Duration
	maxConns    int
	onDecision  func(Decision)
	label       string
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
		log:         opts.Logger,
		resolver:    opts.Resolver,
		dialTimeout: opts.DialTimeout,
		idleTimeout: opts.IdleTimeout,
		maxConns:    opts.MaxConns,
		onDecision:  opts.OnDecision,
		label:       opts.Label,
		refusedLog:  bounded.NewQuota(maxLoggedRefusals),
		conns:       make(map[*trackedConn]struct{}),
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

// serveConnect handles "CONNECT host:port": check, dial, answer 200, then
// relay bytes both ways.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	// net/http parses "CONNECT /path" as a path (the HTTP/2 form); only
	// the authority form names a destination.
	authority := r.URL.Host
	if strings.HasPrefix(r.RequestURI, "/") {
		authority = ""
	}
	host, port, err := net.SplitHostPort(authority)
	if err != nil || authority == "" {
		p.refuse(w, r, Decision{Host: truncate(authority)}, http.StatusBadRequest,
			fmt.Sprintf("CONNECT target %q is not host:port", truncate(r.RequestURI)))
		return
	}
	dst, ok := p.admit(w, r, host, port)
	if !ok {
		return
	}
	up, err := p.dialUpstream(r.Context(), dst)
	if err != nil {
		p.upstreamFailed(w, r, dst, err)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		p.log.Warn("egress: cannot take over the connection", "sandbox", p.label, "error", err)
		http.Error(w, "codecage egress: internal error", http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	defer up.Close()
	// net/http may have left deadlines on the connection; the tunnel
	// manages its own.
	_ = conn.SetDeadline(time.Time{})

	_ = conn.SetWriteDeadline(time.Now().Add(p.idleTimeout))
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	// Clients may send the start of the tunnel (a TLS ClientHello) without
	// waiting for the 200; net/http may already have buffered it.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		_ = up.SetWriteDeadline(time.Now().Add(p.idleTimeout))
		if _, err := up.Write(early); err != nil {
			return
		}
	}
	p.splice(conn, up)
}

// serveForward handles an absolute-form request ("GET http://host/path"):
// check, then forward it over a connection to the checked address only.
func (p *Proxy) serveForward(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Host == "" {
		p.refuse(w, r, Decision{Host: truncate(r.Host)}, http.StatusBadRequest,
			"this is a forward proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port")
		return
	}
	if r.URL.Scheme != "http" {
		p.refuse(w, r, Decision{Host: truncate(r.URL.Host)}, http.StatusBadRequest,
			fmt.Sprintf("scheme %q is not forwarded; use CONNECT for https", r.URL.Scheme))
		return
	}
	port := r.URL.Port()
	if port == "" {
		port = "80"
	}
	dst, ok := p.admit(w, r, r.URL.Hostname(), port)
	if !ok {
		return
	}

	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Host = r.URL.Host
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		// An empty value stops net/http from adding its own User-Agent:
		// the proxy forwards, it does not speak for itself.
		out.Header["User-Agent"] = []string{""}
	}

	// One transport per request, whose only dial target is the checked
	// address: the URL's host is never resolved again (DNS rebinding), and
	// nothing is pooled across requests that might have been checked
	// differently.
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := p.dialUpstream(ctx, dst)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: p.idleTimeout, act: newActivity()}, nil
		},
		DisableKeepAlives: true,
		// Transparent gzip would change the bytes the client receives.
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	defer tr.CloseIdleConnections()

	resp, err := tr.RoundTrip(out)
	if err != nil {
		p.upstreamFailed(w, r, dst, err)
		return
	}
	defer resp.Body.Close()

	removeHopHeaders(resp.Header)
	h := w.Header()
	maps.Copy(h, resp.Header)
	for k := range resp.Trailer {
		h.Add("Trailer", k)
	}
	w.WriteHeader(resp.StatusCode)

	rc := http.NewResponseController(w)
	if err := p.stream(w, rc, resp.Body); err != nil {
		p.log.Warn("egress: response cut short", "sandbox", p.label, "host", r.URL.Host,
			"addr", dst.String(), "error", err)
		// Headers are out; the only honest way to report a truncated body
		// is to drop the connection so the client cannot take it as whole.
		if c, _, err := rc.Hijack(); err == nil {
			c.Close()
		}
		return
	}
	for k, vv := range resp.Trailer {
		h[k] = vv
	}
}

// stream copies an upstream body to the client as it arrives, flushing
// each piece so downloads and event streams are not held back.
func (p *Proxy) stream(w http.ResponseWriter, rc *http.ResponseController, body io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			// A client that stops reading must not hold the proxy forever.
			_ = rc.SetWriteDeadline(time.Now().Add(p.idleTimeout))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			_ = rc.SetWriteDeadline(time.Time{})
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// admit runs the destination check of one request and records the
// decision. It returns the address to dial, or answers the refusal itself
// and returns false.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, host, port string) (netip.AddrPort, bool) {
	t, err := parseTarget(host, port)
	if err != nil {
		d := Decision{Host: truncate(host)}
		d.Port, _ = strconv.Atoi(port)
		p.refuse(w, r, d, http.StatusBadRequest, truncate(err.Error()))
		return netip.AddrPort{}, false
	}
	d := Decision{Host: t.host(), Port: t.port}

	e, ok, portDenied := lookup(p.entries, t)
	if !ok {
		reason := fmt.Sprintf("host %q is not on SANDBOX_NETWORK_ALLOW", t.host())
		if portDenied {
			reason = fmt.Sprintf("port %d of host %q is not on SANDBOX_NETWORK_ALLOW", t.port, t.host())
		}
		p.refuse(w, r, d, http.StatusForbidden, reason)
		return netip.AddrPort{}, false
	}

	addrs := []netip.Addr{t.ip}
	if !t.ip.IsValid() {
		ctx, cancel := context.WithTimeout(r.Context(), p.dialTimeout)
		addrs, err = p.resolver.LookupNetIP(ctx, "ip", t.name)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			p.refuse(w, r, d, http.StatusBadGateway, fmt.Sprintf("cannot resolve %q: %v", t.name, err))
			return netip.AddrPort{}, false
		}
	}

	// Take the first address that passes. Addresses that fail are skipped
	// rather than fatal: a name with one stray private record still works
	// through its public ones, and the private ones are never dialed.
	var refusedAddr netip.Addr
	var refusedClass string
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		class := addrClass(a)
		if class == classPublic || (e.explicit() && !neverDial[class]) {
			dst := netip.AddrPortFrom(a, uint16(t.port))
			d.Allowed, d.Addr = true, dst.String()
			d.Reason = fmt.Sprintf("allowed by %q", e.String())
			if class != classPublic {
				d.Reason += fmt.Sprintf(" (exact entry; %s address)", class)
			}
			p.record(r, d)
			return dst, true
		}
		if !refusedAddr.IsValid() {
			refusedAddr, refusedClass = a, class
		}
	}
	var reason string
	switch {
	case neverDial[refusedClass]:
		reason = fmt.Sprintf("host %q resolves to %s (%s), which is never reachable",
			t.host(), refusedAddr, refusedClass)
	default:
		reason = fmt.Sprintf("host %q resolves to %s (%s); only an exact (non-wildcard) entry may reach non-public addresses",
			t.host(), refusedAddr, refusedClass)
	}
	p.refuse(w, r, d, http.StatusForbidden, reason)
	return netip.AddrPort{}, false
}

// refuse records a refusal and answers it with a short plain-text reason,
// closing the connection: a client that was refused has nothing more to
// say on it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, d Decision, status int, reason string) {
	d.Allowed, d.Reason, d.Addr = false, reason, ""
	p.record(r, d)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "codecage egress: "+reason+"\n")
}

// maxLoggedRefusals bounds the refusals (and connections over MaxConns)
// one proxy logs line by line.
const maxLoggedRefusals = 32

// record logs a decision (a refusal only within refusedLog) and hands it
// to OnDecision.
func (p *Proxy) record(r *http.Request, d Decision) {
	d.Method = truncate(r.Method)
	level := slog.LevelInfo
	if !d.Allowed {
		level = slog.LevelWarn
	}
	if d.Allowed || p.refusedLog.Take() {
		p.logDecision(r, level, d)
	}
	if p.onDecision != nil {
		p.onDecision(d)
	}
}

func (p *Proxy) logDecision(r *http.Request, level slog.Level, d Decision) {
	p.log.LogAttrs(r.Context(), level, "egress decision",
		slog.String("sandbox", p.label),
		slog.String("method", d.Method),
		slog.String("host", d.Host),
		slog.Int("port", d.Port),
		slog.Bool("allowed", d.Allowed),
		slog.String("reason", d.Reason),
		slog.String("addr", d.Addr),
	)
}

// upstreamFailed answers a request whose checked destination could not be
// reached.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, dst netip.AddrPort, err error) {
	p.log.Warn("egress: upstream failed", "sandbox", p.label, "method", truncate(r.Method),
		"addr", dst.String(), "error", err)
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "codecage egress: cannot reach %s: %v\n", dst, err)
}

// dialUpstream connects to a checked address and tracks the connection so
// Close can end it.
func (p *Proxy) dialUpstream(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	c, err := p.dial(ctx, "tcp", dst.String())
	if err != nil {
		return nil, err
	}
	tc, ok := p.track(c)
	if !ok {
		return nil, net.ErrClosed
	}
	return tc, nil
}

// splice relays bytes between the client and upstream until both
// directions are done, either fails, or neither moves for IdleTimeout.
func (p *Proxy) splice(client, upstream net.Conn) {
	act := newActivity()
	c := &idleConn{Conn: client, idle: p.idleTimeout, act: act}
	u := &idleConn{Conn: upstream, idle: p.idleTimeout, act: act}
	done := make(chan struct{})
	p.wg.Go(func() {
		defer close(done)
		pipe(u, c)
	})
	pipe(c, u)
	<-done
}

// pipe copies src to dst. A clean end of src is passed on as a half-close,
// so protocols that shut down one direction first keep working; anything
// else tears both connections down, which also ends the other direction.
func pipe(dst, src *idleConn) {
	_, err := io.Copy(dst, src)
	if err == nil && dst.CloseWrite() == nil {
		return
	}
	dst.Close()
	src.Close()
}

// removeHopHeaders deletes the headers that belong to one connection
// (RFC 9110, 7.6.1) rather than to the message, those the Connection
// header names, and every Proxy-* header: credentials for this proxy must
// never travel on.
func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		delete(h, k)
	}
	for k := range h {
		if len(k) >= 6 && strings.EqualFold(k[:6], "proxy-") {
			delete(h, k)
		}
	}
}

// truncate bounds strings taken from requests before they go into logs.
func truncate(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// listener tracks accepted connections and turns away those over MaxConns.
type listener struct {
	net.Listener
	p *Proxy
}

// Accept returns the next connection within the limit; connections over
// it are answered 503 on a goroutine of their own and never reach net/http.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := l.p
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		tc := &trackedConn{Conn: c, p: p}
		p.conns[tc] = struct{}{}
		if p.clients < p.maxConns {
			tc.client = true
			p.clients++
			p.mu.Unlock()
			return tc, nil
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.rejectBusy(tc)
	}
}

// rejectBusy answers 503 on a connection over MaxConns. It reads and drops
// what the client sent, so closing does not reset the connection before the
// client has read the answer.
func (p *Proxy) rejectBusy(c *trackedConn) {
	defer p.wg.Done()
	defer c.Close()
	if p.refusedLog.Take() {
		p.log.Warn("egress: too many connections", "sandbox", p.label, "limit", p.maxConns)
	}
	body := fmt.Sprintf("codecage egress: too many concurrent connections (limit %d)\n", p.maxConns)
	_ = c.SetDeadline(time.Now().Add(busyGrace))
	_, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if err != nil {
		return
	}
	_ = c.CloseWrite()
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}

// track registers an upstream connection, or closes it if the proxy is
// already closing.
func (p *Proxy) track(c net.Conn) (*trackedConn, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return nil, false
	}
	tc := &trackedConn{Conn: c, p: p}
	p.conns[tc] = struct{}{}
	return tc, true
}

// trackedConn is a connection the proxy knows about until it is closed.
type trackedConn struct {
	net.Conn
	p      *Proxy
	client bool // counts against MaxConns
	once   sync.Once
}

// Close closes the connection and forgets it, once.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.conns, c)
		if c.client {
			c.p.clients--
		}
		c.p.mu.Unlock()
	})
	return err
}

// CloseWrite half-closes the connection when the transport supports it
// (TCP and unix sockets do); net/http also uses it for a graceful close.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// activity is the time of the last byte moved on either side of an
// exchange, on the monotonic clock.
type activity struct {
	start time.Time
	last  atomic.Int64 // nanoseconds since start
}

func newActivity() *activity { return &activity{start: time.Now()} }

func (a *activity) touch() { a.last.Store(int64(time.Since(a.start))) }

func (a *activity) idleFor() time.Duration {
	return time.Since(a.start) - time.Duration(a.last.Load())
}

// idleConn fails reads and writes only when the whole exchange (both
// directions, through the shared activity) has been idle for idle. A plain
// per-read deadline would cut a download while the client is quietly
// waiting, or an upload while the server is quietly reading.
type idleConn struct {
	net.Conn
	idle time.Duration
	act  *activity
}

func (c *idleConn) Read(b []byte) (int, error) {
	for {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
			return 0, err
		}
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.act.touch()
		}
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && c.act.idleFor() < c.idle {
			continue // the other direction moved; not idle
		}
		return n, err
	}
}

func (c *idleConn) Write(b []byte) (int, error) {
	written := 0
	for {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
			return written, err
		}
		n, err := c.Conn.Write(b[written:])
		written += n
		if n > 0 {
			c.act.touch()
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && c.act.idleFor() < c.idle {
			continue
		}
		return written, err
	}
}

// CloseWrite half-closes the underlying connection if it can.
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
