package runtime

import (
	"errors"
	"syscall"

	"github.com/codecage/codecage/internal/fdpass"
	"golang.org/x/sys/unix"
)

// ReadPidfd reads the cell's first message from c, a socket in the
// runtime's poller (its deadline applies): a pidfd of its first process.
func ReadPidfd(c syscall.Conn) (int, error) {
	tag, fd, err := fdpass.Receive(c)
	switch {
	case errors.Is(err, fdpass.ErrNotOne):
		return -1, ErrCellProtocol
	case err != nil:
		return -1, err
	case tag != 'P':
		unix.Close(fd)
		return -1, ErrCellProtocol
	}
	return fd, nil
}
