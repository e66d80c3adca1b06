package frontdoor

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// Listener accepts connections up to its caps: a connection over the cap
// of the listener, or over its client address's, is closed as soon as it
// is accepted (a reset, so that it holds no descriptor in TIME_WAIT),
// counted and logged (one line a second at most, with the count since).
type Listener struct {
	net.Listener
	name              string
	maxConns, perAddr int
	log               *slog.Logger
	refused           func(listener, reason string)

	mu        sync.Mutex
	open      int
	byAddr    map[string]int
	quiet     int       // refusals not logged yet
	lastLog   time.Time // of the last refusal logged
	lastCause string
}

// Refusal reasons, as counted.
const (
	ReasonListenerFull = "listener_full"
	ReasonClientFull   = "client_full"
)

// Listen listens on addr (TCP) with s's connection caps. name labels the
// listener in logs and in refused's calls (a counter; nil: none).
func Listen(name, addr string, s Settings, log *slog.Logger, refused func(listener, reason string)) (*Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Wrap(l, name, s, log, refused), nil
}

// Wrap caps the connections of l.
func Wrap(l net.Listener, name string, s Settings, log *slog.Logger, refused func(listener, reason string)) *Listener {
	if log == nil {
		log = slog.Default()
	}
	return &Listener{Listener: l, name: name, maxConns: s.MaxConns, perAddr: s.MaxConnsPerClient,
		log: log, refused: refused, byAddr: map[string]int{}}
}

// Open is the number of connections open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Accept returns the next connection within the caps.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		if reason := l.admit(addr); reason != "" {
			// Counted before the close, so that whoever sees the reset
			// also sees it counted.
			l.refuse(addr, reason)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, l: l, addr: addr}, nil
	}
}

func (l *Listener) admit(addr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.maxConns > 0 && l.open >= l.maxConns:
		return ReasonListenerFull
	case l.perAddr > 0 && l.byAddr[addr] >= l.perAddr:
		return ReasonClientFull
	}
	l.open++
	l.byAddr[addr]++
	return ""
}

func (l *Listener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

// refuse counts a refusal and logs it, at most once a second: a flood of
// connections must not become a flood of log lines.
func (l *Listener) refuse(addr, reason string) {
	if l.refused != nil {
		l.refused(l.name, reason)
	}
	l.mu.Lock()
	l.quiet++
	now := time.Now()
	if now.Sub(l.lastLog) < time.Second && reason == l.lastCause {
		l.mu.Unlock()
		return
	}
	n := l.quiet
	l.quiet, l.lastLog, l.lastCause = 0, now, reason
	open, fromAddr := l.open, l.byAddr[addr]
	l.mu.Unlock()
	l.log.Warn("connection refused: too many open connections", "listener", l.name, "reason", reason, "remote", addr,
		"open", open, "open_from_remote", fromAddr, "max", l.maxConns, "max_per_client", l.perAddr, "refused_since_last_line", n)
}

// conn gives its place back once, when closed.
type conn struct {
	net.Conn
	l    *Listener
	addr string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// hostOf is a connection's client address without its port.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
