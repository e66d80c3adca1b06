package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

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
	if t, err := parseTarget(host, port); err == nil {
		if set, creds := p.intercepted(t); len(creds) > 0 {
			p.intercept(w, r, t, dst, set, creds)
			return
		}
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
