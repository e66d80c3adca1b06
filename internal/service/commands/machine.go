package commands

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// A machine session's commands (session.Request.Machine) run inside its
// own sandbox, beside its interpreter: one process tree, one cgroup, one
// set of limits. What a command leaves running lives on until it exits
// or the session ends; any program of the session's root may run; and
// python3 is the interpreter's Python, with the session's packages.

// machinePath is a machine's PATH, as a Debian computer's.
const machinePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// inMachine reports whether req runs inside se's sandbox, a machine's
// (native: its init forks it; gVisor: runsc execs it).
func inMachine(se *session.Session) bool {
	return se != nil && se.Machine()
}

// machineVars are the variables a machine's commands start with: its
// PATH, led by the home's ~/.local/bin (what pip and npm install there,
// as on Debian) and the directory of the session's Python so that
// python3 is that one, the package directories its interpreter reads,
// and its proxy's variables when it has one.
func machineVars(home, interpreter string, env envstore.Env, proxyPort int) map[string]string {
	if env.Python != "" {
		interpreter = env.Python
	}
	p := machinePath + ":" + fleet.MachineBin
	if dir := path.Dir(interpreter); interpreter != "" && !strings.Contains(":"+p+":", ":"+dir+":") {
		p = dir + ":" + p
	}
	local := path.Join(home, ".local")
	vars := map[string]string{
		"PATH":       local + "/bin:" + p,
		"PYTHONPATH": fleet.PythonPath,
		// pip installs into the home (the user site, which the
		// interpreter reads too): the system's Python is read-only, not
		// Debian's to protect from it.
		"PIP_BREAK_SYSTEM_PACKAGES": "1",
		// npm install -g, likewise: its packages in ~/.local/lib, its
		// programs in ~/.local/bin (the system's /usr/local is read-only).
		"NPM_CONFIG_PREFIX": local,
	}
	if proxyPort != 0 {
		// Every program reaches the network as the interpreter does:
		// through the session's egress proxy and its rules.
		maps.Copy(vars, fleet.ProxyVars(proxyPort))
	}
	return vars
}

// runInMachine runs the command as a process of the session's sandbox
// (in.Spawn), as root inside if root, within its time limit and ctx (canceled as the session
// closes); its output goes to out, or to daemon. A process that cannot
// start is an error that says why: the sandbox has ended, or the init
// could not fork it (the session's process limit, say).
func (c *Commands) runInMachine(ctx context.Context, req CommandRequest, in session.Command, spec fleet.Spec, root bool, out *fleet.Collector, daemon Daemon) (fleet.Exit, error) {
	proc := fleet.ProcSpec{Argv: spec.Argv, Env: spec.Env, Dir: "/", Stdin: spec.Stdin, Terminal: spec.Terminal, OutputBytes: spec.Limits.OutputBytes, Root: root}
	proc.Stdout, proc.Stderr = out.Writers()
	if daemon != nil {
		proc.Stdout, proc.Stderr = daemon, daemon
	}
	start := time.Now()
	p, err := in.Spawn(proc)
	switch {
	case errors.Is(err, fleet.ErrEnded):
		return fleet.Exit{}, fmt.Errorf("%w: the session's sandbox has ended (its interpreter was killed, or the session is closing)", errdefs.ErrSessionEnded)
	case err != nil && strings.Contains(err.Error(), "temporarily unavailable"):
		return fleet.Exit{}, fmt.Errorf("%w: the command could not start in the session's sandbox: %v (SANDBOX_MAX_PROCESSES=%d: end some of its processes first)",
			errdefs.ErrInvalidRequest, err, c.cfg.MaxProcesses)
	case err != nil:
		return fleet.Exit{}, fmt.Errorf("the command could not start in the session's sandbox: %v", err)
	}
	started(req, p) // its stdin or terminal
	return waitProc(ctx, p, spec.Limits.Timeout, start), nil
}

// waitProc waits for p's end, killing it (and its process group) at its
// time limit or when ctx ends.
func waitProc(ctx context.Context, p fleet.Proc, timeout time.Duration, start time.Time) fleet.Exit {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	limit := fleet.LimitNone
	select {
	case <-p.Done():
	case <-timer.C:
		limit = fleet.LimitTimeout
	case <-ctx.Done():
		limit = fleet.LimitCanceled
	}
	if limit != fleet.LimitNone {
		_ = p.Signal(syscall.SIGKILL)
	}
	e := p.Wait()
	ended := false
	switch {
	case limit != fleet.LimitNone:
	case e.Truncated:
		limit = fleet.LimitOutput
	case e.SandboxEnded && e.OOMKilled:
		limit, ended = fleet.LimitMemory, true // its session's, at its memory limit
	case e.SandboxEnded:
		limit, ended = fleet.LimitCanceled, true // it ended with its session
	case e.OOMKilled:
		limit = fleet.LimitMemory // the session's memory limit
	}
	return fleet.Exit{ExitCode: e.ExitCode, Signal: e.Signal, Limit: limit, Truncated: e.Truncated, OOMKilled: e.OOMKilled,
		SandboxEnded: ended, Duration: time.Since(start)}
}

// withVars is base with vars over it (neither is changed).
func withVars(base, vars map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(vars))
	maps.Copy(out, base)
	maps.Copy(out, vars)
	return out
}
