package fdpass_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/fdpass"
)

// pair is a connected Unix socket pair: the receiving end as a net.Conn
// (in the poller), the sending end as a raw descriptor.
func pair(t *testing.T) (*net.UnixConn, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "recv")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); unix.Close(fds[1]) })
	return c.(*net.UnixConn), fds[1]
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func TestReceiveOneDescriptor(t *testing.T) {
	c, s := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := unix.Sendmsg(s, []byte{'P'}, unix.UnixRights(int(w.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	tag, fd, err := fdpass.Receive(c)
	if err != nil || tag != 'P' {
		t.Fatalf("Receive: tag %q fd %d err %v", tag, fd, err)
	}
	got := os.NewFile(uintptr(fd), "passed")
	defer got.Close()
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
		t.Error("the descriptor received is not close-on-exec")
	}
	if _, err := got.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if n, err := r.Read(b); n != 1 || b[0] != 'x' {
		t.Fatalf("the pipe through the passed end: %d %v", n, err)
	}
}

// Malformed messages are refused and their descriptors closed; a peer
// that closes is io.EOF.
func TestReceiveRefusesOtherMessages(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	c, s := pair(t)
	before := openFDs(t)
	// Two descriptors in one message.
	if err := unix.Sendmsg(s, []byte{'P'}, unix.UnixRights(int(r.Fd()), int(w.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fdpass.Receive(c); !errors.Is(err, fdpass.ErrNotOne) {
		t.Fatalf("two descriptors: %v", err)
	}
	if n := openFDs(t); n != before {
		t.Errorf("%d descriptors open after a refused message, %d before", n, before)
	}
	// A tag without a descriptor.
	if _, err := unix.Write(s, []byte{'P'}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fdpass.Receive(c); !errors.Is(err, fdpass.ErrNotOne) {
		t.Fatalf("no descriptor: %v", err)
	}
	c2, s2 := pair(t)
	unix.Shutdown(s2, unix.SHUT_WR)
	if _, _, err := fdpass.Receive(c2); err != io.EOF {
		t.Fatalf("a closed peer: %v", err)
	}
}
