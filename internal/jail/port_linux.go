package jail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// dialTimeout bounds a connection to a sandbox's loopback: a listener
// whose backlog is full never answers.
const dialTimeout = 5 * time.Second

// dialInNetns connects to port on the loopback of the network namespace
// of the process pidfd refers to. The socket is made in that namespace
// (a socket keeps the namespace it was made in) by a thread that enters
// it for the dial and leaves it after; nothing is added to the
// namespace, no interface, no route: the sandbox keeps its loopback only,
// and the host's own ports are not in it. The kernel refuses the enter
// when the process has ended (a pidfd names one process, never a reused
// number).
func dialInNetns(ctx context.Context, pidfd int, port int) (net.Conn, error) {
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, restored, err := dialFromThread(ctx, pidfd, port)
		if restored {
			// Only a thread back in the host's namespace may serve other
			// goroutines; one that could not go back ends with this one.
			runtime.UnlockOSThread()
		}
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}

// dialFromThread runs on a locked thread: it enters the namespace, dials
// both loopbacks, and goes back. restored is false when going back failed.
func dialFromThread(ctx context.Context, pidfd int, port int) (c net.Conn, restored bool, err error) {
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, fmt.Errorf("jail: the host's network namespace: %w", err)
	}
	defer home.Close()
	if err := unix.Setns(pidfd, unix.CLONE_NEWNET); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, true, ErrEnded
		}
		return nil, true, fmt.Errorf("%w: entering the sandbox's network namespace: %v (a rootless server cannot)", ErrUnsupported, err)
	}
	defer func() {
		restored = unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil
	}()
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var d net.Dialer
	var first error
	// A server may listen on IPv4, IPv6 or both (python's http.server
	// binds "::" with IPv4 mapped): try each loopback.
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err = d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return c, true, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if errors.Is(first, unix.ECONNREFUSED) {
		return nil, true, fmt.Errorf("%w: port %d", ErrPortClosed, port)
	}
	return nil, true, fmt.Errorf("jail: connecting to port %d in the sandbox: %v", port, first)
}

// DialPort connects to port on the sandbox's loopback (see dialInNetns):
// how a client outside reaches a server the sandboxed code runs, without
// the sandbox getting any network.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	fd, err := s.dupPidfd()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return dialInNetns(ctx, fd, port)
}

// dupPidfd is a copy of the init's pidfd for the caller to close;
// ErrEnded once the sandbox is torn down.
func (s *Sandbox) dupPidfd() (int, error) {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	if s.pidfd == nil {
		return -1, ErrEnded
	}
	fd, err := unix.Dup(int(s.pidfd.Fd()))
	if err != nil {
		return -1, fmt.Errorf("jail: %w", err)
	}
	return fd, nil
}

// openPidfd keeps a pidfd of the sandbox's init, for DialPort; called
// before the init can be reaped, so that it is the init's.
func (s *Sandbox) openPidfd() {
	fd, err := unix.PidfdOpen(s.cmd.Process.Pid, 0)
	if err != nil {
		return // DialPort then says the sandbox has ended
	}
	unix.CloseOnExec(fd)
	s.netMu.Lock()
	s.pidfd = os.NewFile(uintptr(fd), "pidfd")
	s.netMu.Unlock()
}

func (s *Sandbox) closePidfd() {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	if s.pidfd != nil {
		_ = s.pidfd.Close()
		s.pidfd = nil
	}
}

// DialPort connects to port on the cell's loopback: the cell's first
// process unshared a network namespace of its own.
func (c *Cell) DialPort(ctx context.Context, port int) (net.Conn, error) {
	c.mu.Lock()
	fd := -1
	var err error
	if c.pidfd != nil && !c.retired {
		fd, err = unix.Dup(int(c.pidfd.Fd()))
	}
	c.mu.Unlock()
	if fd < 0 {
		if err != nil {
			return nil, fmt.Errorf("jail: %w", err)
		}
		return nil, ErrEnded
	}
	defer unix.Close(fd)
	return dialInNetns(ctx, fd, port)
}

// MemoryUsage is the memory the sandbox's processes use now (its
// cgroup's, page cache included), or 0 without a cgroup.
func (s *Sandbox) MemoryUsage() int64 {
	if s.cg == nil {
		return 0
	}
	return max(s.cg.readInt(cgMemory), 0)
}

// MemoryUsage is the memory the cell uses now (0 once it has ended: its
// cgroup may be another cell's then).
func (c *Cell) MemoryUsage() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return 0
	}
	return max(c.cg.readInt(cgMemory), 0)
}

// CPUUsage is the CPU time of the cell's processes so far (0 once it has
// ended).
func (c *Cell) CPUUsage() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired {
		return 0
	}
	return c.cg.cpuUsage()
}

// MemoryUsage is the memory of the cgroup's processes now.
func (c *Cgroup) MemoryUsage() int64 { return max(c.cg.readInt(cgMemory), 0) }
