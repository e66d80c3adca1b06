package fleet

import (
	"errors"
	"strings"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// A machine session's sandbox (Work.Machine) is one process tree: its
// commands start inside it, beside the interpreter (jail.Spec.Machine).

type (
	// ProcSpec describes a process to start in a machine.
	ProcSpec = jail.ProcSpec
	// ProcExit is how a process of a machine ended.
	ProcExit = jail.ProcExit
)

// Proc is a process started in a machine, by either backend: the native
// machine's init forks it, gVisor's runsc execs it.
type Proc interface {
	// PID is its pid inside the machine.
	PID() int
	// Done is closed once it has ended and its output is in.
	Done() <-chan struct{}
	// Wait waits for its end.
	Wait() ProcExit
	// Signal sends sig to it and its process group.
	Signal(sig syscall.Signal) error
	// WriteInput writes to its stdin or terminal; CloseInput ends it.
	WriteInput(b []byte, wait time.Duration) (int, error)
	CloseInput() error
	// Resize changes the size of its terminal.
	Resize(size WindowSize) error
}

// PythonPath lists the package directories a session's interpreter
// reads, in its order (a machine's python3 gets them as PYTHONPATH).
var PythonPath = strings.Join([]string{runtime.SiteDir, runtime.EnvDir, runtime.PackagesDir}, ":")

// ProxyVars are the proxy variables of a sandbox whose proxy is on port
// of its loopback (a machine's commands get them, as its interpreter).
func ProxyVars(port int) map[string]string {
	out := map[string]string{}
	for _, kv := range proxyEnv(port) {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// ErrNotMachine: the sandbox starts nothing beside its program (not a
// machine, or a backend that cannot yet).
var ErrNotMachine = errors.New("the sandbox is not a machine")

// The sandboxes that start processes beside their program: each
// backend's Spawn returns its own kind of process.
type (
	nativeSpawner interface {
		Spawn(jail.ProcSpec) (*jail.Proc, error)
	}
	gvisorSpawner interface {
		Spawn(jail.ProcSpec) (*gvisor.Proc, error)
	}
)

// Spawn starts a process in the lease's sandbox, a machine; it is
// counted in the sandbox's cgroup and limits, and takes no slot of the
// budget. A paused sandbox is resumed first, as a run resumes it.
func (l *Lease) Spawn(spec ProcSpec) (Proc, error) {
	l.used.Store(true)
	b := l.current()
	if p, ok := b.(pauser); ok && p.Paused() {
		_ = p.Resume()
	}
	// Each branch returns a nil Proc on error, never a typed nil.
	switch s := b.(type) {
	case nativeSpawner:
		p, err := s.Spawn(spec)
		if err != nil {
			return nil, err
		}
		return p, nil
	case gvisorSpawner:
		p, err := s.Spawn(spec)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, ErrNotMachine
}
