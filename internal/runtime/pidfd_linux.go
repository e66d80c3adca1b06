package runtime

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadPidfd reads the cell's first message from c, a socket in the
// runtime's poller (its deadline applies): a pidfd of its first process.
func ReadPidfd(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
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
		return -1, err
	}
	if n == 0 {
		return -1, io.EOF
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || n != 1 || buf[0] != 'P' || len(msgs) != 1 {
		return -1, ErrCellProtocol
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, ErrCellProtocol
	}
	return fds[0], nil
}
