package jail

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// input is what the supervisor writes the program's input to: the write
// end of its stdin pipe, or its terminal's master. Nothing is buffered
// here: a write goes to the kernel's buffer (a pipe's 64 KiB, a
// terminal's 4 KiB) or waits, up to its deadline, for the program to
// read.
type input struct {
	mu   sync.Mutex // one writer at a time: chunks never interleave
	f    *os.File   // nil once closed
	term bool       // f is a terminal's master
}

// newTerminal wraps a terminal's master as received from the init.
func newTerminal(fd int) (*input, error) {
	// A master, not any descriptor: TIOCGPTN answers on masters only.
	if _, err := unix.IoctlGetInt(fd, unix.TIOCGPTN); err != nil {
		return nil, fmt.Errorf("%w: the terminal received is not a master: %v", ErrSetup, err)
	}
	// Non-blocking, so that os.File polls it and writes take deadlines.
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("%w: terminal: %v", ErrSetup, err)
	}
	return &input{f: os.NewFile(uintptr(fd), "terminal"), term: true}, nil
}

// WriteInput writes p to the program's stdin or terminal, waiting up to
// wait for the program to read what the kernel cannot hold. It returns
// how much was written: with ErrInputFull, the rest was not.
func (s *Sandbox) WriteInput(p []byte, wait time.Duration) (int, error) {
	in := s.input
	if in == nil {
		return 0, ErrNoInput
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f == nil {
		return 0, fmt.Errorf("%w: it was closed", ErrNoInput)
	}
	if err := in.f.SetWriteDeadline(time.Now().Add(wait)); err != nil {
		return 0, err
	}
	n, err := in.f.Write(p)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, ErrInputFull
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EIO):
		return n, fmt.Errorf("%w: the program has closed it or ended", ErrNoInput)
	}
	return n, err
}

// CloseInput ends the program's stdin (it reads end of file). A terminal
// has no end of file of its own: its program reads one when it is sent
// the terminal's EOF character (^D), so CloseInput sends that.
func (s *Sandbox) CloseInput() error {
	in := s.input
	if in == nil {
		return ErrNoInput
	}
	if in.term {
		_, err := s.WriteInput([]byte{4}, time.Second)
		return err
	}
	in.close()
	return nil
}

// Resize changes the terminal's size; the kernel tells the program's
// foreground process group with SIGWINCH.
func (s *Sandbox) Resize(size WindowSize) error {
	if err := size.Check(); err != nil {
		return err
	}
	in := s.input
	if in == nil || !in.term {
		return fmt.Errorf("%w: the program has no terminal", ErrNoInput)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f == nil {
		return fmt.Errorf("%w: its terminal is closed", ErrNoInput)
	}
	rc, err := in.f.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		return err
	}
	return ioctlErr
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
