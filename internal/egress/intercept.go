package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CredentialUse is one request that left with a credential added.
type CredentialUse struct {
	Name, Host, Method string
}

// SetBindings replaces the sandbox's credential bindings, whose secrets
// resolve gives; tunnels opened from now on use them (one already open
// keeps the secrets it began with). Bindings that do not Check leave the
// old ones in place.
func (p *Proxy) SetBindings(list []Binding, resolve SecretFunc) error {
	if err := CheckBindings(list); err != nil {
		return err
	}
	if len(list)+len(p.operator) == 0 {
		p.creds.Store(nil)
		return nil
	}
	set := &credentialSet{resolve: resolve}
	for i, group := range [][]Binding{p.operator, list} {
		one, err := compileCredentials(group)
		if err != nil {
			return err
		}
		for _, c := range one.list {
			c.operator = i == 0
		}
		set.list = append(set.list, one.list...)
	}
	set.operator = p.operatorSecrets
	p.creds.Store(set)
	return nil
}

// armed is a binding with its secret, for one tunnel.
type armed struct {
	*compiledCredential
	secret string
}

// arm resolves the secrets of a tunnel's bindings. A secret that is gone
// refuses the tunnel, naming the binding: a request sent on without its
// credential would fail at the far end in words nobody can trace back.
func (p *Proxy) arm(ctx context.Context, set *credentialSet, creds []*compiledCredential) ([]armed, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	out := make([]armed, 0, len(creds))
	for _, c := range creds {
		resolve := set.resolve
		if c.operator {
			resolve = set.operator
		}
		if resolve == nil {
			return nil, fmt.Errorf("egress credential %q: no secrets here", clip(c.Label()))
		}
		v, err := resolve(ctx, c.Secret)
		if err != nil {
			return nil, fmt.Errorf("egress credential %q: secret %q: %v", clip(c.Label()), clip(c.Secret), err)
		}
		if !valueOK(v) {
			return nil, fmt.Errorf("egress credential %q: secret %q holds characters a header may not (line breaks, control characters)", clip(c.Label()), clip(c.Secret))
		}
		out = append(out, armed{c, v})
	}
	return out, nil
}

// intercepted reports whether a CONNECT to t is to be opened: a host with
// credentials, on a proxy with an authority.
func (p *Proxy) intercepted(t target) (*credentialSet, []*compiledCredential) {
	set := p.creds.Load()
	return set, set.forHost(t)
}

// intercept answers a CONNECT to a host with credentials: it ends the
// sandbox's TLS with a certificate of the sandbox's authority, adds the
// credentials to each HTTP/1.1 request that matches, and sends it on over
// a TLS connection of its own to the checked address, verified as any
// client would (the host's name, the operator's roots).
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request, t target, dst netip.AddrPort, set *credentialSet, creds []*compiledCredential) {
	keys, err := p.arm(r.Context(), set, creds)
	if err == nil && p.authority == nil {
		// Spliced, the request would leave without its credential.
		err = errors.New("egress credentials: this sandbox's proxy has no certificate authority")
	}
	if err != nil {
		p.log.Warn("egress: credential unavailable", "sandbox", p.label, "host", t.name, "error", err)
		p.upstreamFailed(w, r, dst, err)
		return
	}
	leaf, err := p.authority.leaf(t.name)
	if err != nil {
		p.upstreamFailed(w, r, dst, fmt.Errorf("certificate for %s: %w", t.name, err))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "codecage egress: internal error", http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	_ = conn.SetWriteDeadline(time.Now().Add(p.idleTimeout))
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	_ = conn.SetWriteDeadline(time.Time{})
	var in net.Conn = conn
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		in = &prefixedConn{Conn: conn, r: io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn)}
	}
	in, isTLS := startsTLS(in)
	if !isTLS {
		// Another protocol to the host (ssh, whose server speaks first):
		// tunnelled as any other, untouched.
		up, err := p.dialUpstream(r.Context(), dst)
		if err != nil {
			p.log.Warn("egress: upstream failed", "sandbox", p.label, "addr", dst.String(), "error", err)
			return
		}
		defer up.Close()
		p.splice(in, up)
		return
	}
	tc := tls.Server(in, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	p.serveOpened(tc, t, dst, keys)
}

// serveOpened serves the HTTP/1.1 requests of an opened tunnel's client
// (tc, the sandbox's end of the TLS) until it closes, each sent on to dst
// with the credentials that match added.
func (p *Proxy) serveOpened(tc net.Conn, t target, dst netip.AddrPort, keys []armed) {
	tr := p.upstreamTransport(t.name, dst)
	defer tr.CloseIdleConnections()
	authority := t.name
	if t.port != 443 {
		authority = net.JoinHostPort(t.name, strconv.Itoa(t.port))
	}
	x := &interception{p: p, host: t.name, authority: authority, creds: keys}
	rp := &httputil.ReverseProxy{
		Rewrite:        x.rewrite,
		Transport:      tr,
		ModifyResponse: x.scrub,
		ErrorHandler:   x.failed,
		FlushInterval:  -1,
		ErrorLog:       slog.NewLogLogger(p.log.With("sandbox", p.label).Handler(), slog.LevelDebug),
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	one := newOneConn(tc, p.ctx)
	srv := &http.Server{
		Handler:           x.guard(rp),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       p.idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes - 4096,
		Protocols:         protocols,
		ConnState:         one.state,
		ErrorLog:          slog.NewLogLogger(p.log.With("sandbox", p.label).Handler(), slog.LevelDebug),
	}
	_ = srv.Serve(one)
}

// interception is one opened tunnel's request handling.
type interception struct {
	p               *Proxy
	host, authority string
	creds           []armed
}

type addedKey struct{}

// guard refuses a request whose Host is another than the tunnel's: the
// credential is the tunnel host's, and the request would reach that host
// anyway.
func (x *interception) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Host
		if hh, _, err := net.SplitHostPort(h); err == nil {
			h = hh
		}
		if r.Header.Get("Upgrade") != "" {
			// A hijacked connection would outlive the tunnel's server.
			http.Error(w, "codecage egress: a tunnel to a host with credentials carries HTTP/1.1 requests, not upgrades (WebSocket)", http.StatusNotImplemented)
			return
		}
		if !strings.EqualFold(strings.TrimSuffix(h, "."), x.host) {
			http.Error(w, fmt.Sprintf("codecage egress: this tunnel is to %s; the request names %q", x.host, truncate(r.Host)),
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// rewrite sends the request on to the tunnel's host with the matching
// credentials added; it remembers their values so the answer can be
// scrubbed of them.
func (x *interception) rewrite(pr *httputil.ProxyRequest) {
	out := pr.Out
	out.URL.Scheme, out.URL.Host, out.Host = "https", x.authority, x.authority
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""}
	}
	var added []string
	for _, c := range x.creds {
		if c.applies(pr.In) && c.add(out.Header, c.secret) {
			added = append(added, c.secret)
			x.p.log.Info("egress credential added", "sandbox", x.p.label, "credential", c.Label(),
				"host", x.host, "method", truncate(pr.In.Method))
			if x.p.onCredential != nil {
				x.p.onCredential(CredentialUse{Name: c.Label(), Host: x.host, Method: truncate(pr.In.Method)})
			}
		}
	}
	if len(added) > 0 {
		// An answer in plain bytes can be scrubbed; a compressed one
		// cannot. Servers mostly honour this.
		out.Header.Del("Accept-Encoding")
		pr.Out = out.WithContext(context.WithValue(out.Context(), addedKey{}, added))
	}
}

// scrub drops every response header that carries a value added to the
// request, and any trailer, and masks the values in an uncompressed body:
// an API that echoes the request must not hand the secret back.
func (x *interception) scrub(resp *http.Response) error {
	added, _ := resp.Request.Context().Value(addedKey{}).([]string)
	if len(added) == 0 {
		return nil
	}
	for k, vv := range resp.Header {
		for _, v := range vv {
			if containsAny(v, added) {
				delete(resp.Header, k)
				break
			}
		}
	}
	resp.Trailer = nil
	if enc := resp.Header.Get("Content-Encoding"); enc == "" || strings.EqualFold(enc, "identity") {
		resp.Body = newMasker(resp.Body, added)
	}
	return nil
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// failed answers a request that could not be sent on.
func (x *interception) failed(w http.ResponseWriter, r *http.Request, err error) {
	x.p.log.Warn("egress: upstream failed", "sandbox", x.p.label, "host", x.host, "error", err)
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		status = http.StatusGatewayTimeout
	}
	http.Error(w, fmt.Sprintf("codecage egress: cannot reach %s: %v", x.host, err), status)
}

// upstreamTransport carries an opened tunnel's requests to the checked
// address alone, over TLS verified for name.
func (p *Proxy) upstreamTransport(name string, dst netip.AddrPort) *http.Transport {
	return &http.Transport{
		Proxy:       nil,
		DialContext: p.dialOnly(dst),
		TLSClientConfig: &tls.Config{
			ServerName: name,
			RootCAs:    p.upstreamRoots,
			NextProtos: []string{"http/1.1"},
			MinVersion: tls.VersionTLS12,
		},
		TLSHandshakeTimeout:    p.dialTimeout,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        p.idleTimeout,
	}
}

// prefixedConn reads what was read ahead of the connection first.
type prefixedConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (c *prefixedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// tlsWait is how long a tunnel's client may take to begin: a TLS client
// sends its hello at once, while a protocol whose server speaks first
// (ssh, smtp) sends nothing until it has.
const tlsWait = 2 * time.Second

// startsTLS reports whether c's client begins a TLS handshake (a
// handshake record, 0x16), and gives c with that byte still to read.
func startsTLS(c net.Conn) (net.Conn, bool) {
	br := bufio.NewReaderSize(c, 512)
	_ = c.SetReadDeadline(time.Now().Add(tlsWait))
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	out := &prefixedConn{Conn: c, r: br}
	return out, err == nil && first[0] == 0x16
}

// oneConn is a listener of one connection: Serve returns once it closed
// (or the proxy did).
type oneConn struct {
	c    net.Conn
	ctx  context.Context
	once sync.Once
	done chan struct{}
	took bool
}

func newOneConn(c net.Conn, ctx context.Context) *oneConn {
	return &oneConn{c: c, ctx: ctx, done: make(chan struct{})}
}

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.took {
		l.took = true
		return l.c, nil
	}
	select {
	case <-l.done:
	case <-l.ctx.Done():
		l.c.Close()
	}
	return nil, net.ErrClosed
}

func (l *oneConn) state(_ net.Conn, s http.ConnState) {
	if s == http.StateClosed || s == http.StateHijacked {
		l.once.Do(func() { close(l.done) })
	}
}

func (l *oneConn) Close() error { return nil }

func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }
