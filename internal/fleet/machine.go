package fleet

import (
	"errors"
	"strings"

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
	// Proc is a process started in a machine.
	Proc = jail.Proc
)

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

// spawner is a sandbox that starts processes beside its program.
type spawner interface {
	Spawn(jail.ProcSpec) (*jail.Proc, error)
}

// Spawn starts a process in the lease's sandbox, a machine; it is
// counted in the sandbox's cgroup and limits, and takes no slot of the
// budget. A paused sandbox is resumed first, as a run resumes it.
func (l *Lease) Spawn(spec ProcSpec) (*Proc, error) {
	l.used.Store(true)
	b := l.current()
	s, ok := b.(spawner)
	if !ok {
		return nil, ErrNotMachine
	}
	if p, ok := b.(pauser); ok && p.Paused() {
		_ = p.Resume()
	}
	return s.Spawn(spec)
}
