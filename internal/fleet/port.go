package fleet

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// ErrPortClosed means nothing listens on the port in the sandbox.
var ErrPortClosed = jail.ErrPortClosed

// ErrPortsUnsupported means the sandbox's backend keeps its loopback
// where the host cannot reach it.
var ErrPortsUnsupported = fmt.Errorf("%w: this backend's ports cannot be reached from the host", jail.ErrUnsupported)

// portDialer is a sandbox whose loopback the host can connect to without
// giving it any network: the native jail and its cells from the host in
// its network namespace, gVisor through a relay runsc execs inside.
type portDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// DialPort connects to a server listening on port of the sandbox's
// loopback. A backend that cannot answers ErrPortsUnsupported.
func (l *Lease) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := jail.CheckPort(port); err != nil {
		return nil, err
	}
	d, ok := l.current().(portDialer)
	if !ok {
		return nil, fmt.Errorf("%w (backend %s)", ErrPortsUnsupported, l.backend)
	}
	return d.DialPort(ctx, port)
}

// netnsHolder is a sandbox whose network namespace the host can hold
// (the native jail).
type netnsHolder interface {
	NetNS() (*jail.NetNS, error)
}

// NetNS opens the sandbox's network namespace, for its session to hold
// and share (Work.NetNS); nil without error when the backend's network
// is its own (gVisor's, in runsc).
func (l *Lease) NetNS() (*NetNS, error) {
	h, ok := l.current().(netnsHolder)
	if !ok {
		return nil, nil
	}
	return h.NetNS()
}

// CheckPort refuses a port number that is not a TCP port.
func CheckPort(port int) error { return jail.CheckPort(port) }

// Usage is what the sandbox uses now, for metrics.
type Usage struct {
	// CPU is the CPU time its processes have used since it started.
	CPU time.Duration
	// Memory is its memory now (its cgroup's, page cache included).
	Memory int64
}

type usageNow interface {
	CPUUsage() time.Duration
	MemoryUsage() int64
}

// Usage reads the sandbox's cgroup (zero without one).
func (l *Lease) Usage() Usage {
	if u, ok := l.current().(usageNow); ok {
		return Usage{CPU: u.CPUUsage(), Memory: u.MemoryUsage()}
	}
	return Usage{}
}
