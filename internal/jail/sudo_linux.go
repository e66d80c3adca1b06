package jail

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// sudo in a machine with root inside (Spec.RootInside). A set-user-ID
// sudo cannot raise anyone under no_new_privs, so the machine's init
// serves one: SudoPath, a Python script, hands the command and its
// caller's stdin, stdout and stderr to the init over SudoSocket; the init
// forks it as root inside, like a process the supervisor asked for, and
// answers with its pid, then its end. Anyone in the machine may ask, as
// E2B's user has passwordless sudo: root inside has no host privilege.

//go:embed sudo.py
var sudoScript string

// maxSudo bounds the sudo commands of one machine waiting or running at
// once: each holds a connection and, running, a process.
const maxSudo = 64

// sudoOrder is what the script sends, with its three descriptors.
type sudoOrder struct {
	Argv []string
	Env  []string
	Dir  string
}

// sudoAnswer is what the init sends back: the process's pid (or why it
// did not start), then how it ended.
type sudoAnswer struct {
	PID          int    `json:",omitempty"`
	Error        string `json:",omitempty"`
	Exited       bool   `json:",omitempty"`
	Code, Signal int    // with Exited
}

// sudoFork asks the forking thread for a root process.
type sudoFork struct {
	order sudoOrder
	fds   []int
	pid   chan<- int // 0: it did not start (err says why)
	ended chan<- procExited
	err   *error
}

// placeSudo writes the script, run by python (the machine's interpreter),
// and listens on SudoSocket, both while the root is being built, before
// the pivot: the socket's inode is the one the sandbox's path names after
// it, and the listener is made before the init restricts itself.
func placeSudo(python string) (*net.UnixListener, error) {
	dst := newRoot + SudoPath
	for _, d := range []string{filepath.Dir(dst), filepath.Dir(newRoot + SudoSocket)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("sudo: %w", err)
		}
	}
	if err := os.WriteFile(dst, []byte(SudoScript(python)), 0o755); err != nil {
		return nil, fmt.Errorf("sudo: %w", err)
	}
	sock := newRoot + SudoSocket
	_ = os.Remove(sock) // one the last start left in a kept root
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("sudo: %w", err)
	}
	l.SetUnlinkOnClose(false) // the path is the sandbox's, gone with it
	if err := os.Chmod(sock, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("sudo: %w", err)
	}
	return l, nil
}

// SudoScript is the machine's sudo, run by python (gVisor's machines
// place it too; their server is gvisor's sudod.py).
func SudoScript(python string) string { return "#!" + python + " -I\n" + sudoScript }

// sudoPython is the interpreter sudo runs on: the machine's own (its
// python link), else the host's.
func sudoPython(links map[string]string) string {
	for p, target := range links {
		if strings.HasSuffix(p, "/python") {
			return target
		}
	}
	return "/usr/bin/python3"
}

// serveSudo answers the machine's sudo commands; forks go to the
// forking thread (the one Landlock restricted, whose children inherit it).
func (m *machineInit) serveSudo(l *net.UnixListener, forks chan<- sudoFork) {
	var busy atomic.Int32
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if busy.Add(1) > maxSudo {
			busy.Add(-1)
			answerSudo(c, sudoAnswer{Error: fmt.Sprintf("this machine runs %d sudo commands already", maxSudo)})
			c.Close()
			continue
		}
		go func() {
			defer busy.Add(-1)
			defer c.Close()
			m.sudo(c, forks)
		}()
	}
}

// sudo serves one connection: its order, the process's start, the
// signals the caller forwards, the process's end.
func (m *machineInit) sudo(c *net.UnixConn, forks chan<- sudoFork) {
	order, fds, err := readSudoOrder(c)
	if err != nil {
		answerSudo(c, sudoAnswer{Error: err.Error()})
		return
	}
	pid := make(chan int, 1)
	ended := make(chan procExited, 1)
	var forkErr error
	forks <- sudoFork{order: order, fds: fds, pid: pid, ended: ended, err: &forkErr}
	p := <-pid
	if p == 0 {
		answerSudo(c, sudoAnswer{Error: fmt.Sprintf("%s: %v", order.Argv[0], forkErr)})
		return
	}
	answerSudo(c, sudoAnswer{PID: p})
	go forwardSignals(c, p)
	end := <-ended
	answerSudo(c, sudoAnswer{Exited: true, Code: end.Code, Signal: end.Signal})
}

// readSudoOrder reads the order and its three descriptors; any other
// count of descriptors, or a malformed order, is refused.
func readSudoOrder(c *net.UnixConn) (sudoOrder, []int, error) {
	var order sudoOrder
	buf := make([]byte, 256<<10)
	oob := make([]byte, unix.CmsgSpace(4*8))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return order, nil, err
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, msg := range msgs {
			got, err := unix.ParseUnixRights(&msg)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	bad := func(why string) (sudoOrder, []int, error) {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return order, nil, errors.New(why)
	}
	if len(fds) != 3 {
		return bad("the order came without its caller's stdin, stdout and stderr")
	}
	if err := json.Unmarshal(buf[:n], &order); err != nil {
		return bad("a malformed order")
	}
	if len(order.Argv) == 0 || !strings.HasPrefix(order.Argv[0], "/") {
		return bad("the command's path must be absolute")
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	return order, fds, nil
}

// forwardSignals passes on what the caller forwards (its own ^C, its
// kill) to the root process and its group, until the caller hangs up.
func forwardSignals(c *net.UnixConn, pid int) {
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var s struct{ Signal int }
		if json.Unmarshal(buf[:n], &s) != nil || s.Signal <= 0 || s.Signal >= 65 {
			continue
		}
		_ = unix.Kill(-pid, unix.Signal(s.Signal))
		_ = unix.Kill(pid, unix.Signal(s.Signal))
	}
}

func answerSudo(c *net.UnixConn, a sudoAnswer) {
	b, _ := json.Marshal(a)
	_, _ = c.Write(b)
}

// forkSudo starts a sudo order as root, on the forking thread.
func (m *machineInit) forkSudo(f sudoFork) {
	defer func() {
		for _, fd := range f.fds {
			_ = unix.Close(fd)
		}
	}()
	var term *terminal
	pid, err := m.fork(spawnOrder{Argv: f.order.Argv, Env: f.order.Env, Dir: f.order.Dir, Root: true}, f.fds, &term, f.ended)
	*f.err = err
	f.pid <- pid
}
