package egress

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"
)

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
