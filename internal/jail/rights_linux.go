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
// terminal's master, and a machine's supervisor hands its init a
// process's stdin, stdout and stderr. At most maxRights are kept; any
// other is closed.
type rightsReader struct {
	f   *os.File
	mu  sync.Mutex
	fds []int
}

// maxRights bounds the descriptors a rights reader keeps: one order's
// three.
const maxRights = 3

func newRightsReader(f *os.File) *rightsReader { return &rightsReader{f: f} }

// Read implements io.Reader.
func (r *rightsReader) Read(p []byte) (int, error) {
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	oob := make([]byte, unix.CmsgSpace(4*8))
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
			if len(r.fds) < maxRights {
				r.fds = append(r.fds, fd)
			} else {
				_ = unix.Close(fd)
			}
		}
	}
}

// take returns the first descriptor received (-1: none), closes any
// other, and forgets them.
func (r *rightsReader) take() int {
	fds := r.takeAll()
	if len(fds) == 0 {
		return -1
	}
	for _, fd := range fds[1:] {
		_ = unix.Close(fd)
	}
	return fds[0]
}

// takeAll returns the descriptors received, in order, and forgets them.
func (r *rightsReader) takeAll() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	fds := r.fds
	r.fds = nil
	return fds
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

// sendWithFDs writes v as one JSON line on ctl (blocking) with fds
// alongside, through ctl's own descriptor: once ctl is closed it fails,
// never writing to whatever took the number.
func sendWithFDs(ctl *os.File, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	rc, err := ctl.SyscallConn()
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			var n int
			n, serr = unix.SendmsgN(int(fd), b, oob, nil, 0)
			if serr == unix.EINTR {
				continue
			}
			if serr != nil {
				return true
			}
			// The descriptors went with the first bytes; the rest follow.
			b, oob = b[n:], nil
		}
		return true
	}); err != nil {
		return err
	}
	return serr
}
