package fdpass

import (
	"errors"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotOne is a message that did not carry a one-byte tag and exactly one
// descriptor.
var ErrNotOne = errors.New("fdpass: not a tag with one descriptor")

// Receive reads one message from c, through the runtime's poller (c's
// deadline applies), and returns its tag and descriptor (close-on-exec).
// io.EOF: the peer closed without a message. Descriptors of a malformed
// message are closed, never leaked.
func Receive(c syscall.Conn) (tag byte, fd int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, -1, err
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, -1, err
	}
	if n == 0 && oobn == 0 {
		return 0, -1, io.EOF
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	var fds []int
	if err == nil && len(msgs) == 1 {
		fds, err = unix.ParseUnixRights(&msgs[0])
	}
	if err != nil || n != 1 || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return 0, -1, ErrNotOne
	}
	return buf[0], fds[0], nil
}
