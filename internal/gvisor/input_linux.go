package gvisor

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
)

// input is what the supervisor writes a command's input to: the write end
// of the pipe runsc hands the program as its stdin (Spec.Stdin), or the
// master of the terminal runsc made for it (Spec.Terminal). As in the
// native jail nothing is buffered here: a write goes to the kernel's
// buffer or waits, up to its deadline, for the program to read.
type input struct {
	mu   sync.Mutex // one writer at a time: chunks never interleave
	f    *os.File   // nil once closed
	term bool       // f is a terminal's master
}

// WriteInput writes p to the program's stdin or terminal, waiting up to
// wait for the program to read what the kernel cannot hold. It returns
// how much was written: with [jail.ErrInputFull], the rest was not.
func (s *Sandbox) WriteInput(p []byte, wait time.Duration) (int, error) {
	in := s.input
	if in == nil {
		return 0, jail.ErrNoInput
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f == nil {
		return 0, fmt.Errorf("%w: it was closed", jail.ErrNoInput)
	}
	if err := in.f.SetWriteDeadline(time.Now().Add(wait)); err != nil {
		return 0, err
	}
	n, err := in.f.Write(p)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, jail.ErrInputFull
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EIO), errors.Is(err, os.ErrClosed):
		return n, fmt.Errorf("%w: the program has closed it or ended", jail.ErrNoInput)
	}
	return n, err
}

// CloseInput ends the program's stdin (it reads end of file); a terminal's
// program is sent the terminal's EOF character (^D), as in the jail.
func (s *Sandbox) CloseInput() error {
	in := s.input
	if in == nil {
		return jail.ErrNoInput
	}
	if in.term {
		_, err := s.WriteInput([]byte{4}, time.Second)
		return err
	}
	in.close()
	return nil
}

// Resize changes the terminal's size. gVisor's kernel reads the size from
// the host terminal it was given but is not told of a change, so the
// program is sent SIGWINCH through runsc, as the host's kernel would.
func (s *Sandbox) Resize(size jail.WindowSize) error {
	if err := size.Check(); err != nil {
		return err
	}
	in := s.input
	if in == nil || !in.term {
		return fmt.Errorf("%w: the program has no terminal", jail.ErrNoInput)
	}
	in.mu.Lock()
	if in.f == nil {
		in.mu.Unlock()
		return fmt.Errorf("%w: its terminal is closed", jail.ErrNoInput)
	}
	rc, err := in.f.SyscallConn()
	if err != nil {
		in.mu.Unlock()
		return err
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		in.mu.Unlock()
		return err
	}
	in.mu.Unlock()
	if ioctlErr != nil {
		return ioctlErr
	}
	return s.signalForeground(unix.SIGWINCH)
}

// close closes the input once; a write under way ends first.
func (in *input) close() {
	if in == nil {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f != nil {
		_ = in.f.Close()
		in.f = nil
	}
}
