package egress

import (
	"net"
	"sync"
)

// A sandbox reaches its proxy at a port of its own loopback: the jail
// hands each such connection over (the fleet's Forward) instead of the
// proxy accepting it from a socket. A handoff is the listener the proxy
// serves them from.
type handoff struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	port  int
}

// ServeHandedOff serves the connections given to the returned function
// (the sandbox's, to its port) until p closes; a connection handed over
// after that is closed.
func (p *Proxy) ServeHandedOff(port int) (deliver func(net.Conn)) {
	l := &handoff{conns: make(chan net.Conn), done: make(chan struct{}), port: port}
	go p.Serve(l)
	return l.deliver
}

func (l *handoff) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

// Accept implements net.Listener.
func (l *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *handoff) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener: the sandbox's side.
func (l *handoff) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port}
}
