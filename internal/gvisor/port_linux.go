package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
)

// A gVisor sandbox's loopback is in runsc's own network stack, which no
// host socket enters, and runsc's port forwarding needs a network (it
// refuses --network=none). So a connection to a sandbox's port is a small
// relay that `runsc exec` starts inside, as the sandbox's uid: it connects
// to 127.0.0.1:PORT (or ::1) in gVisor's stack and copies bytes between
// that socket and its stdio, one end of a socket pair whose other end is
// the connection the host gets. The sandbox gains no network: the relay
// reaches only what its own loopback does.

// portRelay is the relay, run by the sandbox's python3: it says "O" once
// connected, exits 3 when nothing listens, then copies both ways.
const portRelay = `import os, socket, sys, threading
s = None
for h in ("127.0.0.1", "::1"):
    try:
        s = socket.create_connection((h, int(sys.argv[1])), 5)
        break
    except OSError:
        pass
if s is None:
    sys.exit(3)
s.settimeout(None)
os.write(1, b"O")
def up():
    try:
        while True:
            b = os.read(0, 65536)
            if not b:
                break
            s.sendall(b)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        os.write(1, b)
except OSError:
    pass
`

// portRelayPython is the relay's interpreter inside the sandbox: the
// harness's, and an allowed python3's for a command.
const portRelayPython = "/usr/bin/python3"

// portDialTimeout bounds the relay's start and connect (runsc exec and
// python's start take tens of milliseconds, far more on a loaded host).
const portDialTimeout = 20 * time.Second

// portClosedExit is the relay's exit status when nothing listens.
const portClosedExit = 3

// DialPort connects to port on the sandbox's loopback through a relay
// started in it: see portRelay. It fails with [jail.ErrPortClosed] when
// nothing listens there, [jail.ErrEnded] once the sandbox has ended.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := jail.CheckPort(port); err != nil {
		return nil, err
	}
	s.mu.Lock()
	cg := s.cg
	s.mu.Unlock()
	if cg == nil || s.killed.Load() {
		return nil, jail.ErrEnded
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gvisor: port relay: %w", err)
	}
	host := os.NewFile(uintptr(pair[0]), "port")
	inside := os.NewFile(uintptr(pair[1]), "port-inside")
	var stderr bytes.Buffer
	uid := strconv.Itoa(s.who.user())
	// runsc exec's host process joins the sandbox's cgroup: it is counted
	// there, and a kill of the sandbox takes it too.
	args := append([]string{"-c", joinCgroup, "sh"}, cg.ProcsFiles()...)
	args = append(args, "--", s.runsc, "--root="+s.stateRoot(), "exec", "--user="+uid+":"+uid, "--cwd=/", s.id,
		portRelayPython, "-I", "-S", "-c", portRelay, strconv.Itoa(port))
	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inside, inside, &limitedBuffer{b: &stderr, max: 2048}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	inside.Close()
	if err != nil {
		host.Close()
		return nil, fmt.Errorf("gvisor: port relay: %w", err)
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
	}()
	ctx, cancel := context.WithTimeout(ctx, portDialTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = host.SetReadDeadline(time.Now()) })
	var b [1]byte
	n, readErr := host.Read(b[:])
	stop()
	if n == 1 && b[0] == 'O' {
		_ = host.SetReadDeadline(time.Time{})
		c, err := net.FileConn(host) // a dup: host is closed below
		host.Close()
		if err != nil {
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("gvisor: port relay: %w", err)
		}
		return c, nil
	}
	host.Close()
	if readErr != nil && ctx.Err() != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		return nil, fmt.Errorf("gvisor: connecting to port %d in the sandbox: %w", port, ctx.Err())
	}
	<-waited
	switch code := cmd.ProcessState.ExitCode(); {
	case code == portClosedExit:
		return nil, fmt.Errorf("%w: port %d", jail.ErrPortClosed, port)
	case s.killed.Load() || cgEnded(s):
		return nil, jail.ErrEnded
	default:
		return nil, fmt.Errorf("gvisor: the port relay failed (exit %d): %s", code, bytes.TrimSpace(stderr.Bytes()))
	}
}

// cgEnded reports whether the sandbox has been torn down.
func cgEnded(s *Sandbox) bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// limitedBuffer keeps the first max bytes written to it: runsc's words
// about a failed relay, bounded.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
