package jail

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// fdForward is the init's socket to the supervisor for passing connections.
const fdForward = 7

// listenForward opens the sandbox's loopback listener. It runs before
// Landlock, which forbids binding ports.
func listenForward(port int) (net.Listener, error) {
	l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, fmt.Errorf("forward listener: %w", err)
	}
	return l, nil
}

// serveForward passes each accepted connection's descriptor to the
// supervisor (SCM_RIGHTS) and closes the sandbox's copy.
func serveForward(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		f, err := c.(*net.TCPConn).File()
		c.Close()
		if err != nil {
			continue
		}
		err = unix.Sendmsg(fdForward, []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0)
		f.Close()
		if err != nil {
			return // the supervisor is gone
		}
	}
}

// receiveForwards turns descriptors from the init into connections for
// handle, until the init closes its end.
func receiveForwards(sock *os.File, handle func(net.Conn)) {
	fc, err := net.FileConn(sock) // through the poller: no thread parked per sandbox
	sock.Close()
	if err != nil {
		return
	}
	defer fc.Close()
	uc := fc.(*net.UnixConn)
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				f := os.NewFile(uintptr(fd), "forwarded")
				c, err := net.FileConn(f)
				f.Close()
				if err == nil {
					go handle(c)
				}
			}
		}
	}
}
