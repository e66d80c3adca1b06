package commands

import (
	"errors"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Bounds of a command's input. Nothing is held on the host: each write
// goes to the kernel's buffer (a pipe's 64 KiB, a terminal's 4 KiB) and
// waits for the command to read the rest.
const (
	// MaxInputChunk bounds one write to a command's stdin or terminal.
	MaxInputChunk = 1 << 20
	// InputWait is how long a write waits for the command to read.
	InputWait = 10 * time.Second
)

// CommandInput writes to a running command's stdin or terminal
// (CommandRequest.Stdin, Terminal); OnInput hands it over once it runs.
type CommandInput struct {
	lease    inputTarget
	terminal bool
}

// inputTarget is what a command's input is written to: its sandbox's
// (a lease), or its process's in a machine session.
type inputTarget interface {
	WriteInput(p []byte, wait time.Duration) (int, error)
	CloseInput() error
	Resize(fleet.WindowSize) error
}

// Terminal reports whether the command runs on a terminal.
func (in *CommandInput) Terminal() bool { return in.terminal }

// Write sends p to the command. A command that does not read within
// InputWait is reported busy, with what it took of p written.
func (in *CommandInput) Write(p []byte) error {
	if len(p) > MaxInputChunk {
		return fmt.Errorf("%w: %d bytes of input in one write, at most %d", errdefs.ErrInvalidRequest, len(p), MaxInputChunk)
	}
	if len(p) == 0 {
		return nil
	}
	n, err := in.lease.WriteInput(p, InputWait)
	return inputError(err, n, len(p))
}

// Close ends the command's stdin: it reads end of file (on a terminal,
// ^D is typed).
func (in *CommandInput) Close() error { return inputError(in.lease.CloseInput(), 0, 0) }

// Resize changes the size of the command's terminal.
func (in *CommandInput) Resize(cols, rows int) error {
	if !in.terminal {
		return fmt.Errorf("%w: the command runs without a terminal", errdefs.ErrInvalidRequest)
	}
	size, err := terminalSize(cols, rows)
	if err != nil {
		return err
	}
	return inputError(in.lease.Resize(size), 0, 0)
}

// terminalSize checks a terminal's size as a request gives it.
func terminalSize(cols, rows int) (fleet.WindowSize, error) {
	const side = fleet.MaxTerminalSide
	if cols < 1 || rows < 1 || cols > side || rows > side {
		return fleet.WindowSize{}, fmt.Errorf("%w: terminal size %dx%d: columns and rows go from 1 to %d", errdefs.ErrInvalidRequest, cols, rows, side)
	}
	return fleet.WindowSize{Cols: uint16(cols), Rows: uint16(rows)}, nil
}

func inputError(err error, n, size int) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fleet.ErrInputFull):
		return fmt.Errorf("%w: the command has not read its input for %s (%d of %d bytes written)", errdefs.ErrBusy, InputWait, n, size)
	case errors.Is(err, fleet.ErrNoInput):
		return fmt.Errorf("%w: %v", errdefs.ErrInvalidRequest, err)
	}
	return err
}

// feedInput writes data to a command's stdin, a chunk at a time, then
// closes it. It stops at the first refusal: a command that ends or stops
// reading (for InputWait) gets no more, and the run never waits for it.
func feedInput(in *CommandInput, data string) {
	defer in.Close()
	for len(data) > 0 {
		n := min(len(data), MaxInputChunk)
		if in.Write([]byte(data[:n])) != nil {
			return
		}
		data = data[n:]
	}
}
