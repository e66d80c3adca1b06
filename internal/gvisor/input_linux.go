package gvisor

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
)

// A gVisor command's input is a jail.Input: the write end of the pipe
// runsc hands the program as its stdin (Spec.Stdin), or the master of the
// terminal runsc made for it (Spec.Terminal).

// WriteInput writes p to the program's stdin or terminal (jail.Input.Write).
func (s *Sandbox) WriteInput(p []byte, wait time.Duration) (int, error) {
	return s.input.Write(p, wait)
}

// CloseInput ends the program's stdin (jail.Input.End).
func (s *Sandbox) CloseInput() error { return s.input.End() }

// Resize changes the terminal's size. gVisor's kernel reads the size from
// the host terminal it was given but is not told of a change, so the
// program is sent SIGWINCH through runsc, as the host's kernel would.
func (s *Sandbox) Resize(size jail.WindowSize) error {
	if err := s.input.Resize(size); err != nil {
		return err
	}
	return s.signalForeground(unix.SIGWINCH)
}
