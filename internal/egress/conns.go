package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

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
