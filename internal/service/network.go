package service

import (
	"net"
	"sync"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
)

// proxyPort is where the egress proxy appears on the sandbox's loopback.
const proxyPort = 3128

// startEgress runs a proxy for one sandbox: connections to the sandbox's
// 127.0.0.1:3128 arrive through the jail's Forward and are served under the
// operator's allow list; refused, when set, hears of each host it refuses.
// The caller closes the proxy when the run (or the session) ends.
func (s *Service) startEgress(label string, refused func(host string)) (*egress.Proxy, *fleet.Forward) {
	l := newConnListener()
	opts := egress.Options{Label: label, Logger: s.log()}
	if refused != nil {
		opts.OnDecision = func(d egress.Decision) {
			if !d.Allowed {
				refused(d.Host)
			}
		}
	}
	p := egress.New(s.egress, opts)
	go p.Serve(l)
	return p, &fleet.Forward{Port: proxyPort, Handle: l.deliver}
}

// connListener is a net.Listener fed with connections handed over by the
// jail instead of accepted from a socket.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener() *connListener {
	return &connListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

// Accept implements net.Listener.
func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *connListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: proxyPort}
}
