// Package commands is the service's commands domain: run_command (a
// command line or a program with its arguments, in the command jail,
// alone or in a session's workspace beside its interpreter), a session's
// daemon, and a running command's input. It is plain logic over the
// session table and the fleet: the service's root admits, forwards and
// audits each request, resolves its session, and hands it here.
package commands

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/session"
)

// Options are what the commands domain is given by the service's root.
type Options struct {
	Config   config.Config
	Fleet    *fleet.Fleet
	Sessions *session.Table
	// Caps are the operator's bounds every sandbox shares.
	Caps fleet.Caps
	Log  func() *slog.Logger
	// FleetError says what a failure to get a sandbox means to the caller.
	FleetError func(ctx context.Context, err error) error
	// Layers are the isolation layers a run on a backend gets.
	Layers func(backend string) fleet.Layers
	// LimitMessage explains a limit that ended a run, as a run's result
	// words it.
	LimitMessage func(l fleet.Limit, lim fleet.Limits) string
	// WorkspacePath turns a path a caller gives into one relative to the
	// workspace (the files domain's rule, so that working_dir means what
	// a file's path means).
	WorkspacePath func(p, home string) (string, error)
}

// Commands runs commands. It is safe for concurrent use.
type Commands struct {
	o    Options
	cfg  config.Config
	host commandSet // the host's programs, resolved once
	// envPrograms are the programs of each environment's root.
	envPrograms envProgramCache
}

// New returns the commands domain.
func New(o Options) *Commands {
	return &Commands{o: o, cfg: o.Config}
}

// Run runs req in the command jail: the same namespaces, limits, seccomp
// and teardown as a Python run, on a root that holds only the allowed
// programs (the kernel refuses to execute anything else). se, already
// resolved by the caller, is the session whose workspace it runs in (nil:
// a fresh, empty one); its run lock need not be held (a command runs
// beside the interpreter, or beside the run that asked for it).
func (c *Commands) Run(ctx context.Context, se *session.Session, req CommandRequest) (*CommandResult, error) {
	return c.run(ctx, se, req, nil)
}

// RunDaemon runs req as session se's daemon (an environment's start
// command): it lives as long as its session, and its output goes to out
// instead of the result.
func (c *Commands) RunDaemon(ctx context.Context, se *session.Session, req CommandRequest, out Daemon) (*CommandResult, error) {
	return c.run(ctx, se, req, out)
}

func (c *Commands) run(ctx context.Context, se *session.Session, req CommandRequest, daemon Daemon) (*CommandResult, error) {
	var in session.Command // the session's workspace, uid and CPU time since its last request
	if se != nil {
		// Beside the interpreter and the session's other commands, on the
		// same workspace, as processes of one machine.
		start := c.o.Sessions.StartCommand
		if daemon != nil {
			start = c.o.Sessions.StartDaemon
		}
		var done func()
		var err error
		if ctx, in, done, err = start(ctx, se); err != nil {
			return nil, err
		}
		defer done()
	}
	home, env, sessionEnv := fleet.WorkspaceDir, envstore.Env{}, map[string]string(nil)
	if se != nil {
		env = se.Environment() // a session's (commands alone: the host's root)
		home, sessionEnv = se.Home(), c.sessionVars(se, env)
	}
	root, err := asRoot(req, se)
	if err != nil {
		return nil, err
	}
	if root {
		sessionEnv = rootVars(sessionEnv)
	}
	machine := inMachine(se)
	ok, err := c.check(req, home, sessionEnv, machine)
	if err != nil {
		return nil, err
	}
	if root && req.WorkingDir == "" {
		ok.dir = RootHome
	}
	var programs *fleet.Programs // a machine runs any program of its root
	if !machine {
		programs, err = c.programs(ctx, env)
	}
	if err != nil {
		// The operator's list, not the sandbox, is at fault: every
		// surface says so (an internal error, not "unavailable", which
		// E2B's SDKs read as a sandbox that ended).
		return nil, fmt.Errorf("the command jail cannot be built from SANDBOX_ALLOWED_COMMANDS: %v", err)
	}
	backend := c.backend(se)
	if machine {
		backend = se.Backend() // its own sandbox's
	}
	out := fleet.NewCollector(req.OnOutput)
	if req.Interactive() {
		out = fleet.NewInteractiveCollector(req.OnOutput)
	}
	work := c.work(req, ok, home, env, programs, out, daemon)
	if se != nil {
		inSession(&work, se, in, backend)
	}
	spec := work.Spec()
	var exit fleet.Exit
	if machine {
		if exit, err = c.runInMachine(ctx, req, in, spec, root, out, daemon); err != nil {
			return nil, err
		}
	} else {
		lease, err := c.o.Fleet.Start(ctx, backend, spec)
		if err != nil {
			return nil, c.o.FleetError(ctx, err)
		}
		if se != nil {
			in.Attach(lease) // a pause of the session pauses it too
		}
		started(req, lease)
		exit = lease.WaitProgram()
	}
	if streamed(req) {
		out.Flush()
		exit.Truncated = exit.Truncated || out.Dropped()
	}
	return c.result(spec, exit, out.Stdout(), lastWords(out, daemon), in.Idle, backend, home, machine), nil
}

// sessionVars are the variables a command of session se starts with: its
// environment's and its own, and a machine's (its PATH, led by sudo's
// directory when it has root inside, before an environment's PATH too).
func (c *Commands) sessionVars(se *session.Session, env envstore.Env) map[string]string {
	vars := withEnvVars(env, se.Env())
	if !inMachine(se) {
		return vars
	}
	vars = withVars(machineVars(se.Home(), c.cfg.Interpreter, env, se.ProxyPort()), vars)
	if se.ProxyPort() != 0 && se.Trust() != "" {
		// The machine's trust store, bound at its start: its proxy's
		// authority, for the hosts it adds credentials to.
		vars = withVars(fleet.TrustVars(), vars)
	}
	if se.RootInside() {
		vars["PATH"] = fleet.MachineSudoDir + ":" + vars["PATH"]
	}
	return vars
}

// streamed reports whether req's whole output streams (Streamed).
func streamed(req CommandRequest) bool { return req.Streamed && req.OnOutput != nil }

// lastWords is the result's stderr: a daemon's last words (for
// commandError), or the command's.
func lastWords(out *fleet.Collector, daemon Daemon) string {
	if daemon != nil {
		return daemon.String()
	}
	return out.Stderr()
}

// work describes the command's sandbox.
func (c *Commands) work(req CommandRequest, ok checked, home string, env envstore.Env, programs *fleet.Programs, out *fleet.Collector, daemon Daemon) fleet.Work {
	// The working directory is entered by the shell, so that a missing one
	// is the shell's ordinary error.
	argv := []string{"/bin/sh", "-c", `cd -- "$1" || exit 2; shift; exec /bin/sh -c "$1"`, "sh", ok.dir, req.Command}
	if len(req.Argv) > 0 {
		argv = append([]string{"/bin/sh", "-c", `cd -- "$1" || exit 2; shift; exec "$@"`, "sh", ok.dir}, req.Argv...)
	}
	work := fleet.Work{Kind: fleet.Command, ID: fleet.NewID(), Argv: argv, Env: ok.env, Home: home, Programs: programs,
		Root: env.RootDir, EnvLayer: env.LayerDir, Limits: c.o.Caps.Command(ok.timeout)}
	work.Stdout, work.Stderr = out.Writers()
	if streamed(req) {
		// The output limit bounds what the result keeps, not the command.
		out.Keep(work.Limits.OutputBytes)
		work.Limits.OutputBytes = unboundedOutput
	}
	if daemon != nil {
		daemonWork(&work, daemon, c.cfg.SessionMaxLifetime)
	}
	work.Stdin = req.Stdin || req.Input != ""
	if req.Terminal != nil {
		size, _ := terminalSize(req.Terminal.Cols, req.Terminal.Rows) // checked already
		work.Terminal = &size
	}
	return work
}

// inSession puts work in session se's workspace, as in.
func inSession(work *fleet.Work, se *session.Session, in session.Command, backend string) {
	work.Workspace, work.HostUID, work.Tmp = in.Workspace, in.UID, in.Tmp
	work.LoopbackServers = se.Request().Servers
	if backend == fleet.Native {
		// One loopback per session, as in a VM: its interpreter's
		// and its other commands' servers are reached on 127.0.0.1.
		work.NetNS = in.NetNS
	}
}

// daemonWork makes work a session's daemon: it lives up to lifetime (it
// ends with its session first), and its output, unbounded, goes to tail
// (a server's log would reach any output limit in time).
func daemonWork(work *fleet.Work, tail Daemon, lifetime time.Duration) {
	work.Stdout, work.Stderr = tail, tail
	work.Limits.Timeout, work.Limits.CPUTime = lifetime, lifetime
	work.Limits.OutputBytes = unboundedOutput
}

// unboundedOutput is the output budget of a program whose output is not
// kept whole (a daemon's, a streamed command's): none the program reaches.
const unboundedOutput = math.MaxInt64 / 4

// started hands the running command its input, and tells the caller.
func started(req CommandRequest, lease inputTarget) {
	if req.OnInput != nil && req.Interactive() {
		req.OnInput(&CommandInput{lease: lease, terminal: req.Terminal != nil})
	}
	if req.Input != "" && !req.Interactive() {
		go feedInput(&CommandInput{lease: lease}, req.Input)
	}
	if req.OnStart != nil {
		req.OnStart()
	}
}

// backend is where a command runs: a gVisor session's commands run
// under gVisor too, as every run does with SANDBOX_ISOLATION=gvisor, so its
// kernel stays between them and the host's; but only with a runsc that
// refuses code from noexec mounts, on which the allow-list rests there
// (Debian's of 2022 maps it: its commands stay on the native jail).
func (c *Commands) backend(se *session.Session) string {
	gv := (se != nil && se.Backend() == fleet.GVisor) || (se == nil && c.cfg.Isolation == config.IsolationGVisor)
	if gv && fleet.ProbeGVisor(c.cfg.Runsc, c.cfg.GVisorPlatform).EnforcesNoexec {
		return fleet.GVisor
	}
	return fleet.Native
}
