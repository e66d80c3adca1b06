package gvisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A command's terminal under gVisor is runsc's: given --console-socket
// and "terminal": true, runsc opens a host pseudo-terminal, hands its
// master to the socket (SCM_RIGHTS) and gives the slave to gVisor's
// kernel as the program's controlling terminal. The program's processes
// stay inside the Sentry: only the Sentry touches the slave, and the
// supervisor holds the master (output to Stdout, input, size).

// consoleName is the socket in the bundle that receives the master.
const consoleName = "console.sock"

// consoleWait bounds the wait for runsc to hand the master over (it does
// before it boots the sandbox: a few milliseconds).
const consoleWait = 30 * time.Second

// listenConsole listens on the bundle's console socket; only root (runsc
// runs as root) may connect.
func (s *Sandbox) listenConsole() (*net.UnixListener, string, error) {
	path := filepath.Join(s.dir, consoleName)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, "", fmt.Errorf("gvisor: console socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, "", fmt.Errorf("gvisor: console socket: %w", err)
	}
	return l, path, nil
}

// receiveConsole takes the terminal's master from runsc, which connects
// to l once; it gives up when runsc ends first (waited is closed) or
// after consoleWait.
func receiveConsole(l *net.UnixListener, waited <-chan struct{}) (*os.File, error) {
	_ = l.SetDeadline(time.Now().Add(consoleWait))
	type result struct {
		f   *os.File
		err error
	}
	got := make(chan result, 1)
	go func() {
		f, err := acceptMaster(l)
		got <- result{f, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			return nil, fmt.Errorf("gvisor: no terminal from runsc: %w", r.err)
		}
		return r.f, nil
	case <-waited:
		_ = l.Close()
		if r := <-got; r.f != nil {
			_ = r.f.Close()
		}
		return nil, errors.New("gvisor: runsc ended before it gave the terminal")
	}
}

func acceptMaster(l *net.UnixListener) (*os.File, error) {
	c, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(consoleWait))
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return nil, fmt.Errorf("%d descriptors received, want the master", len(fds))
	}
	fd := fds[0]
	unix.CloseOnExec(fd)
	// A master, not any descriptor: TIOCGPTN answers on masters only.
	if _, err := unix.IoctlGetInt(fd, unix.TIOCGPTN); err != nil {
		_ = unix.Close(fd)
		return nil, errors.New("the descriptor received is not a terminal's master")
	}
	// Non-blocking, so that os.File polls it and writes take deadlines.
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "terminal"), nil
}

// signalForeground tells the relay (the sandbox's init) with SIGWINCH
// that the host terminal's size changed: it passes the size on to the
// command's terminal, whose kernel signals the foreground group.
func (s *Sandbox) signalForeground(sig unix.Signal) error {
	return s.runscArgs("kill", s.id, strconv.Itoa(int(sig)))
}
