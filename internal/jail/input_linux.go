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

// Input is what a supervisor writes a program's input to: the write end
// of its stdin pipe, or its terminal's master. Nothing is buffered here:
// a write goes to the kernel's buffer (a pipe's 64 KiB, a terminal's
// 4 KiB) or waits, up to its deadline, for the program to read. Both
// backends use it: the native jail and gVisor (whose runsc hands over the
// same two kinds of descriptor). A nil *Input is a program without input.
type Input struct {
	mu   sync.Mutex // one writer at a time: chunks never interleave
	f    *os.File   // nil once closed
	term bool       // f is a terminal's master
}

// NewInput takes f, the write end of a stdin pipe or (term) a terminal's
// master, which the Input now owns.
func NewInput(f *os.File, term bool) *Input { return &Input{f: f, term: term} }

// Terminal is the terminal's master, or nil for a pipe (or no input): the
// program's output is read from it.
func (in *Input) Terminal() *os.File {
	if in == nil || !in.term {
		return nil
	}
	return in.f
}

// newTerminal wraps a terminal's master as received from the init.
func newTerminal(fd int) (*Input, error) {
	// A master, not any descriptor: TIOCGPTN answers on masters only.
	if _, err := unix.IoctlGetInt(fd, unix.TIOCGPTN); err != nil {
		return nil, fmt.Errorf("%w: the terminal received is not a master: %v", ErrSetup, err)
	}
	// Non-blocking, so that os.File polls it and writes take deadlines.
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("%w: terminal: %v", ErrSetup, err)
	}
	return NewInput(os.NewFile(uintptr(fd), "terminal"), true), nil
}

// Write writes p to the program's stdin or terminal, waiting up to wait
// for the program to read what the kernel cannot hold. It returns how
// much was written: with ErrInputFull, the rest was not.
func (in *Input) Write(p []byte, wait time.Duration) (int, error) {
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
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EIO), errors.Is(err, os.ErrClosed):
		return n, fmt.Errorf("%w: the program has closed it or ended", ErrNoInput)
	}
	return n, err
}

// End ends the program's stdin (it reads end of file). A terminal has no
// end of file of its own: its program reads one when it is sent the
// terminal's EOF character (^D), so End sends that.
func (in *Input) End() error {
	if in == nil {
		return ErrNoInput
	}
	if in.term {
		_, err := in.Write([]byte{4}, time.Second)
		return err
	}
	in.Close()
	return nil
}

// Resize changes the terminal's size; the host's kernel tells the
// program's foreground process group with SIGWINCH.
func (in *Input) Resize(size WindowSize) error {
	if err := size.Check(); err != nil {
		return err
	}
	if in == nil || !in.term {
		return fmt.Errorf("%w: the program has no terminal", ErrNoInput)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.f == nil {
		return fmt.Errorf("%w: its terminal is closed", ErrNoInput)
	}
	return SetWindowSize(in.f, size)
}

// Close closes the input once; a write under way ends first.
func (in *Input) Close() {
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

// WriteInput writes p to the program's stdin or terminal (Input.Write).
func (s *Sandbox) WriteInput(p []byte, wait time.Duration) (int, error) {
	return s.input.Write(p, wait)
}

// CloseInput ends the program's stdin (Input.End).
func (s *Sandbox) CloseInput() error { return s.input.End() }

// Resize changes the program's terminal's size (Input.Resize).
func (s *Sandbox) Resize(size WindowSize) error { return s.input.Resize(size) }
