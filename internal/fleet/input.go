package fleet

import (
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// inputBox is a sandbox whose program reads input the supervisor writes:
// a stdin pipe or a terminal (the native jail's).
type inputBox interface {
	WriteInput(p []byte, wait time.Duration) (int, error)
	CloseInput() error
	Resize(size jail.WindowSize) error
}

func (l *Lease) inputBox() (inputBox, error) {
	b, ok := l.current().(inputBox)
	if !ok {
		return nil, fmt.Errorf("%w: the %s backend gives programs no stdin or terminal", ErrNoInput, l.backend)
	}
	return b, nil
}

// WriteInput writes p to the program's stdin or terminal (Work.Stdin,
// Work.Terminal), waiting up to wait for the program to read what the
// kernel's buffer cannot hold; it returns how much was written.
func (l *Lease) WriteInput(p []byte, wait time.Duration) (int, error) {
	b, err := l.inputBox()
	if err != nil {
		return 0, err
	}
	return b.WriteInput(p, wait)
}

// CloseInput ends the program's stdin (a terminal's program is sent ^D).
func (l *Lease) CloseInput() error {
	b, err := l.inputBox()
	if err != nil {
		return err
	}
	return b.CloseInput()
}

// Resize changes the size of the program's terminal.
func (l *Lease) Resize(size WindowSize) error {
	b, err := l.inputBox()
	if err != nil {
		return err
	}
	return b.Resize(size)
}
