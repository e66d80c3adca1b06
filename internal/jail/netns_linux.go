package jail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// NetNS is a sandbox's network namespace, held open by the host: a
// session's, which its interpreter and its commands join (Spec.NetNS) so
// that they reach each other's loopback servers, as processes of one
// machine do, while other sessions keep namespaces of their own. Holding
// it keeps it alive after the sandbox that made it ends (with lo, and
// nothing else, in it).
type NetNS struct {
	mu sync.Mutex
	f  *os.File // nil once closed
}

// NetNS opens the sandbox's network namespace (its init's).
func (s *Sandbox) NetNS() (*NetNS, error) {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	if s.pidfd == nil {
		return nil, ErrEnded
	}
	f, err := os.Open("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("jail: the sandbox's network namespace: %w", err)
	}
	// The number was the init's when it was opened if the init is still
	// there now (a reaped init's number could be another process's).
	if err := unix.PidfdSendSignal(int(s.pidfd.Fd()), 0, nil, 0); err != nil {
		f.Close()
		return nil, ErrEnded
	}
	return &NetNS{f: f}, nil
}

// Close lets the namespace go once no process is in it.
func (n *NetNS) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return nil
	}
	err := n.f.Close()
	n.f = nil
	return err
}

// dup is a descriptor of the namespace for the caller to close.
func (n *NetNS) dup() (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.f == nil {
		return -1, fmt.Errorf("%w: its network namespace was closed", ErrEnded)
	}
	fd, err := unix.Dup(int(n.f.Fd()))
	if err != nil {
		return -1, fmt.Errorf("jail: %w", err)
	}
	return fd, nil
}

// Inode identifies the namespace (as /proc/<pid>/ns/net names it:
// net:[inode]).
func (n *NetNS) Inode() (uint64, error) {
	fd, err := n.dup()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// DialPort connects to port on the namespace's loopback (see dialInNetns).
func (n *NetNS) DialPort(ctx context.Context, port int) (net.Conn, error) {
	fd, err := n.dup()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return dialInNetns(ctx, fd, port)
}

var (
	hostNetOnce sync.Once
	hostNet     *os.File
	hostNetErr  error
)

// hostNetns is the host's network namespace, where a thread that entered
// a sandbox's goes back. Opened by a thread that has entered none: every
// thread that serves goroutines is in the host's (one that could not go
// back is never unlocked, and ends).
func hostNetns() (int, error) {
	hostNetOnce.Do(func() {
		hostNet, hostNetErr = os.Open("/proc/thread-self/ns/net")
	})
	if hostNetErr != nil {
		return -1, fmt.Errorf("jail: the host's network namespace: %w", hostNetErr)
	}
	return int(hostNet.Fd()), nil
}

// enterNetns moves the calling thread, locked to its goroutine, into n
// (nil: stays) and returns how to go back; back reports whether the
// thread is home again (if not, it must stay locked, and end with its
// goroutine).
func enterNetns(n *NetNS) (back func() bool, err error) {
	if n == nil {
		return func() bool { return true }, nil
	}
	home, err := hostNetns()
	if err != nil {
		return nil, err
	}
	fd, err := n.dup()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: joining a session's network namespace: %v (a rootless server cannot)", ErrUnsupported, err)
		}
		return nil, fmt.Errorf("%w: joining a session's network namespace: %v", ErrSetup, err)
	}
	return func() bool { return unix.Setns(home, unix.CLONE_NEWNET) == nil }, nil
}
