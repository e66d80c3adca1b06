package egress

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

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

	out := forwardedRequest(r)
	tr := p.forwardTransport(dst)
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

// forwardTransport is a transport for one request, whose only dial target
// is the checked address: the URL's host is never resolved again (DNS
// rebinding), and nothing is pooled across requests that might have been
// checked differently.
func (p *Proxy) forwardTransport(dst netip.AddrPort) *http.Transport {
	return &http.Transport{
		Proxy:             nil,
		DialContext:       p.dialOnly(dst),
		DisableKeepAlives: true,
		// Transparent gzip would change the bytes the client receives.
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
}

// forwardedRequest is the client's request as it goes upstream: in origin
// form, without hop-by-hop or Proxy-* headers.
func forwardedRequest(r *http.Request) *http.Request {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Host = r.URL.Host
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		// An empty value stops net/http from adding its own User-Agent:
		// the proxy forwards, it does not speak for itself.
		out.Header["User-Agent"] = []string{""}
	}
	return out
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

// dialOnly is a transport's dialer whose one target is the checked
// address dst, whatever the request names: the name is never resolved
// again (DNS rebinding).
func (p *Proxy) dialOnly(dst netip.AddrPort) func(ctx context.Context, _, _ string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := p.dialUpstream(ctx, dst)
		if err != nil {
			return nil, err
		}
		return &idleConn{Conn: c, idle: p.idleTimeout, act: newActivity()}, nil
	}
}
