package jail

import (
	"encoding/json"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// rightsReader reads the control socket and keeps the descriptors that
// come with its bytes (SCM_RIGHTS): how the init hands the supervisor a
// terminal's master. At most one is kept; any other is closed.
type rightsReader struct {
	f  *os.File
	mu sync.Mutex
	fd int // -1: none
}

func newRightsReader(f *os.File) *rightsReader { return &rightsReader{f: f, fd: -1} }

// Read implements io.Reader.
func (r *rightsReader) Read(p []byte) (int, error) {
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	oob := make([]byte, unix.CmsgSpace(4*4))
	var n, oobn int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return 0, err
	}
	if oobn > 0 {
		r.keep(oob[:oobn])
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *rightsReader) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if r.fd < 0 {
				r.fd = fd
			} else {
				_ = unix.Close(fd)
			}
		}
	}
}

// take returns the descriptor received (-1: none) and forgets it.
func (r *rightsReader) take() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	fd := r.fd
	r.fd = -1
	return fd
}

// sendWithFD writes v as one JSON line on the control socket, with fd
// passed alongside.
func sendWithFD(ctl *os.File, v any, fd int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return unix.Sendmsg(int(ctl.Fd()), append(b, '\n'), unix.UnixRights(fd), nil, 0)
}
