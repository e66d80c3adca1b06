//go:build !linux

package jail

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/reexec"
)

// The jail needs Linux namespaces, Landlock and seccomp; elsewhere every
// call reports ErrUnsupported, so the rest of codecage still builds.

// Host describes the isolation layers this machine offers.
type Host struct {
	Rootless       bool
	UserNamespaces error
	Seccomp        error
	LandlockABI    int
}

// ProbeHost reports that nothing is available.
func ProbeHost() Host {
	err := fmt.Errorf("%w: %s is not Linux", ErrUnsupported, runtime.GOOS)
	return Host{Rootless: os.Geteuid() != 0, UserNamespaces: err, Seccomp: err}
}

// CgroupVersion is always 0 here.
func (h Host) CgroupVersion() int { return 0 }

// CgroupReason says why there are no cgroups.
func (h Host) CgroupReason() string { return "not Linux" }

// CPUBandwidth always fails here.
func (h Host) CPUBandwidth() error { return h.UserNamespaces }

// Pausable always fails here.
func (h Host) Pausable() error { return ErrUnsupported }

// Layers reports no layers.
func (h Host) Layers() Layers {
	return Layers{Rootless: h.Rootless, Cgroup: "none", Warnings: []string{"not Linux: no sandbox"}}
}

// Usable always fails here.
func (h Host) Usable() error { return h.UserNamespaces }

// Sandbox is never created here.
type Sandbox struct{}

// Start fails: there is no jail on this system.
func Start(ctx context.Context, spec Spec) (*Sandbox, error) { return nil, ProbeHost().Usable() }

// Channel is nil.
func (s *Sandbox) Channel() *os.File { return nil }

// ID is empty.
func (s *Sandbox) ID() string { return "" }

// Layers reports no layers.
func (s *Sandbox) Layers() Layers { return ProbeHost().Layers() }

// Done is closed.
func (s *Sandbox) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Wait returns at once.
func (s *Sandbox) Wait() Exit { return Exit{} }

// Kill does nothing.
func (s *Sandbox) Kill(Limit) {}

// MaybeRunInit runs a registered helper when asked; no process is ever a
// sandbox init here.
func MaybeRunInit() { reexec.Run() }

// Cell is never created here.
type Cell struct{}

// NewCell fails: there are no cells on this system.
func NewCell(id string, lim Limits, stdout, stderr io.Writer) (*Cell, error) {
	return nil, ProbeHost().Usable()
}

// OutputFiles returns nothing.
func (c *Cell) OutputFiles() (stdout, stderr *os.File) { return nil, nil }

// ClosePassed does nothing.
func (c *Cell) ClosePassed() {}

// ID is empty.
func (c *Cell) ID() string { return "" }

// Attach fails.
func (c *Cell) Attach(ctx context.Context, pidfd int) error { return ProbeHost().Usable() }

// Arm does nothing.
func (c *Cell) Arm(ctx context.Context, timeout, cpu time.Duration) {}

// Kill does nothing.
func (c *Cell) Kill(Limit) {}

// Abandon does nothing.
func (c *Cell) Abandon() {}

// Done is closed.
func (c *Cell) Done() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Wait returns at once.
func (c *Cell) Wait() Exit { return Exit{} }

// Collect returns at once.
func (c *Cell) Collect() Exit { return Exit{} }

// ReleaseCellCgroups does nothing: no cell ever had a cgroup here.
func ReleaseCellCgroups() {}

// HostUID is 0.
func (s *Sandbox) HostUID() int { return 0 }

// Arm does nothing.
func (s *Sandbox) Arm(ctx context.Context, timeout, cpu time.Duration) {}

// SetCPU does nothing.
func (s *Sandbox) SetCPU(cores float64) error { return nil }

// CPUUsage is zero.
func (s *Sandbox) CPUUsage() time.Duration { return 0 }

// Pause fails: pausing needs Linux's cgroup freezer.
func (s *Sandbox) Pause() error { return ErrUnsupported }

// Resume fails: pausing needs Linux's cgroup freezer.
func (s *Sandbox) Resume() error { return ErrUnsupported }

// Paused is false.
func (s *Sandbox) Paused() bool { return false }

// Cgroup is never created here.
type Cgroup struct{}

// NewCgroup fails: there are no cgroups on this system.
func NewCgroup(id string, memory int64, tasks int, cores float64) (*Cgroup, error) {
	return nil, ProbeHost().Usable()
}

// ProcsFiles is empty.
func (c *Cgroup) ProcsFiles() []string { return nil }

// CPUUsage is zero.
func (c *Cgroup) CPUUsage() time.Duration { return 0 }

// SetCPU does nothing.
func (c *Cgroup) SetCPU(cores float64) error { return nil }

// MemoryPeak is zero.
func (c *Cgroup) MemoryPeak() int64 { return 0 }

// OOMKilled is false.
func (c *Cgroup) OOMKilled() bool { return false }

// KillAll does nothing.
func (c *Cgroup) KillAll() error { return nil }

// Destroy does nothing.
func (c *Cgroup) Destroy() error { return nil }

// WriteInput fails: there is no sandbox here.
func (s *Sandbox) WriteInput(p []byte, wait time.Duration) (int, error) { return 0, ErrUnsupported }

// CloseInput fails: there is no sandbox here.
func (s *Sandbox) CloseInput() error { return ErrUnsupported }

// Resize fails: there is no sandbox here.
func (s *Sandbox) Resize(size WindowSize) error { return ErrUnsupported }

// DialPort fails: there is no sandbox here.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return nil, ProbeHost().Usable()
}

// MemoryUsage is 0.
func (s *Sandbox) MemoryUsage() int64 { return 0 }

// OpenRootDir fails: there is no sandbox here.
func (s *Sandbox) OpenRootDir(string) (*os.File, error) { return nil, ProbeHost().Usable() }

// DialPort fails: there is no cell here.
func (c *Cell) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return nil, ProbeHost().Usable()
}

// MemoryUsage is 0.
func (c *Cell) MemoryUsage() int64 { return 0 }

// CPUUsage is 0.
func (c *Cell) CPUUsage() time.Duration { return 0 }

// MemoryUsage is 0.
func (c *Cgroup) MemoryUsage() int64 { return 0 }

// NetNS is never opened here.
type NetNS struct{}

// NetNS fails: there is no sandbox here.
func (s *Sandbox) NetNS() (*NetNS, error) { return nil, ProbeHost().Usable() }

// Close does nothing.
func (n *NetNS) Close() error { return nil }

// Inode fails: there is no namespace here.
func (n *NetNS) Inode() (uint64, error) { return 0, ProbeHost().Usable() }

// DialPort fails: there is no namespace here.
func (n *NetNS) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return nil, ProbeHost().Usable()
}

// Proc is a process of a machine (Linux only).
type Proc struct{}

// Spawn is unsupported off Linux.
func (s *Sandbox) Spawn(ProcSpec) (*Proc, error) { return nil, ErrUnsupported }

// PID is 0 off Linux.
func (p *Proc) PID() int { return 0 }

// Done is closed: there is no process.
func (p *Proc) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Wait returns at once.
func (p *Proc) Wait() ProcExit { return ProcExit{} }

// Signal is unsupported off Linux.
func (p *Proc) Signal(syscall.Signal) error { return ErrUnsupported }

// WriteInput is unsupported off Linux.
func (p *Proc) WriteInput([]byte, time.Duration) (int, error) { return 0, ErrUnsupported }

// CloseInput is unsupported off Linux.
func (p *Proc) CloseInput() error { return ErrUnsupported }

// Resize is unsupported off Linux.
func (p *Proc) Resize(WindowSize) error { return ErrUnsupported }

// RootInsideCapabilities is empty here: there is no root inside.
func RootInsideCapabilities() uint64 { return 0 }

// RootInsideCapabilityNames is empty here too.
func RootInsideCapabilityNames() []string { return nil }
