//go:build !linux

package gvisor

import (
	"context"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// gVisor runs on Linux only; elsewhere every call reports ErrUnavailable.

// Sandbox is never created here.
type Sandbox struct{}

// Start fails: gVisor needs Linux.
func Start(ctx context.Context, rt Runtime, spec jail.Spec) (*Sandbox, error) {
	return nil, ErrUnavailable
}

// Probe reports that gVisor is unavailable.
func Probe(rt Runtime) Availability {
	return Availability{Platform: rt.Platform, Error: "gVisor needs Linux, not " + runtime.GOOS}
}

// Kill does nothing.
func (s *Sandbox) Kill(reason jail.Limit) {}

// Arm does nothing.
func (s *Sandbox) Arm(ctx context.Context, timeout, cpu time.Duration) {}

// Channel is nil.
func (s *Sandbox) Channel() *os.File { return nil }

// HostUID is zero.
func (s *Sandbox) HostUID() int { return 0 }

// ID is empty.
func (s *Sandbox) ID() string { return "" }

// Done is closed.
func (s *Sandbox) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Wait returns at once.
func (s *Sandbox) Wait() jail.Exit { return jail.Exit{ExitCode: -1} }

// Log is empty.
func (s *Sandbox) Log() string { return "" }

// SetCPU does nothing.
func (s *Sandbox) SetCPU(cores float64) error { return nil }

// CPUUsage is zero.
func (s *Sandbox) CPUUsage() time.Duration { return 0 }

// MemoryUsage is zero.
func (s *Sandbox) MemoryUsage() int64 { return 0 }

// Usage is zero.
func (s *Sandbox) Usage() (time.Duration, int64) { return 0, 0 }

// Checkpoint fails: gVisor needs Linux.
func (s *Sandbox) Checkpoint(ctx context.Context, imageDir string, leaveRunning bool) (Manifest, error) {
	return Manifest{}, ErrUnavailable
}

// Restore fails: gVisor needs Linux.
func Restore(ctx context.Context, rt Runtime, imageDir string, spec jail.Spec) (*Sandbox, error) {
	return nil, ErrUnavailable
}

// ReadImage fails: gVisor needs Linux.
func ReadImage(dir string) (Manifest, error) { return Manifest{}, ErrUnavailable }

// Pause fails: gVisor needs Linux.
func (s *Sandbox) Pause() error { return ErrUnavailable }

// Resume fails: gVisor needs Linux.
func (s *Sandbox) Resume() error { return ErrUnavailable }

// Paused is false.
func (s *Sandbox) Paused() bool { return false }

// Proc is never started here.
type Proc struct{}

// Spawn fails: gVisor needs Linux.
func (s *Sandbox) Spawn(jail.ProcSpec) (*Proc, error) { return nil, ErrUnavailable }

// PID is zero.
func (p *Proc) PID() int { return 0 }

// Done is closed.
func (p *Proc) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Wait returns at once.
func (p *Proc) Wait() jail.ProcExit { return jail.ProcExit{} }

// Signal fails.
func (p *Proc) Signal(syscall.Signal) error { return ErrUnavailable }

// WriteInput fails.
func (p *Proc) WriteInput([]byte, time.Duration) (int, error) { return 0, ErrUnavailable }

// CloseInput fails.
func (p *Proc) CloseInput() error { return ErrUnavailable }

// Resize fails.
func (p *Proc) Resize(jail.WindowSize) error { return ErrUnavailable }
