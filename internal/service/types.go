// Package service is the service every surface calls (CLI, MCP, REST): it
// holds what a request means (admission and callers' limits, run limits,
// import policy, results and events, sessions and their workspaces and
// files, commands, packages, code mode, forwarding to other replicas) and
// returns one result object, whatever the surface.
//
// It never starts, counts or stops a sandbox itself: every sandbox comes
// from its fleet (internal/fleet) as a lease, built from a [fleet.Work]
// the service describes (what the request needs: its limits, profiles,
// workspace, network). It imports neither the jail, gVisor, the harness
// nor the pools: the fleet re-exports the facts it needs of them
// (internal/archtest holds the rule). It knows nothing of HTTP, MCP or
// flags.
//
// Every operation goes through one envelope, written once in ops.go (to
// the owning replica, or admit, bind to shutdown, run, audit), from a
// table that also serves the peer protocol (ServePeer). The sessions
// themselves (their table, state, locks and lock order, lifecycle,
// workspaces, the run in a session) are internal/session's; sessions.go
// and session_run.go hold what a session request means, persist.go and
// snapshots.go its pause, resume, snapshots and forks (kept in the
// snapshot store, internal/snapstore).
package service

import (
	"time"

	"github.com/codecage/codecage/internal/service/report"
)

// Request asks for one stateless execution.
type Request struct {
	// Code is the Python source; it must be valid UTF-8.
	Code string
	// Timeout is the wall-clock limit (0: the default).
	Timeout time.Duration
	// CPUTime is the CPU-time limit (0: the default).
	CPUTime time.Duration
	// MemoryBytes is the memory limit (0: the default).
	MemoryBytes int64
	// OutputBytes caps stdout and stderr, each (0: the default).
	OutputBytes int64
	// SessionID runs the code in that session's interpreter (its profiles
	// and memory limit were chosen when it was created).
	SessionID string
	// Owner is who asks (an API key's name); sessions are per owner.
	Owner string
	// Profiles selects the capability profiles of the run (default: the
	// operator's default set, every enabled profile unless configured).
	Profiles []string
	// AllowedImports narrows the importable modules to this list (within
	// what the operator allows); ["*"] switches the import policy off where
	// the operator allows that.
	AllowedImports []string
	// UseContainer runs the code under gVisor (where container mode is on).
	UseContainer bool
	// Tools narrows the upstream tools the code may call through its
	// `tools` object ("server.tool", "server.*"); nil: all the operator
	// exposes.
	Tools []string
	// Context names an interpreter state of the session: a session runs
	// several side by side, sharing its workspace ("" is its first one).
	Context string `json:",omitempty"`
	// NewContext starts Context afresh (no variables), in Cwd.
	NewContext bool `json:",omitempty"`
	// Cwd is where a new context starts, inside the sandbox ("": home).
	Cwd string `json:",omitempty"`
	// ContextID names one of the session's code contexts (CreateContext)
	// instead of Context and Language: the run uses its state and
	// language. "default" is Python's default context.
	ContextID string `json:",omitempty"`
	// RestartIfEnded restarts the session's interpreter first when it has
	// ended (a limit, or killed), as a notebook's kernel is: the workspace
	// stays, the variables are lost.
	RestartIfEnded bool `json:",omitempty"`
	// Env adds environment variables for this run (not loader or
	// interpreter ones), over the session's.
	Env map[string]string `json:",omitempty"`
	// Display asks for the last value's representations by MIME type
	// (Result.Display), as a notebook shows them.
	Display bool `json:",omitempty"`
	// Language runs the code in a kernel of that language in the session
	// ("" or "python": its interpreter; "javascript", "typescript",
	// "bash": a kernel process per context, as the operator allows with
	// SANDBOX_KERNELS).
	Language string `json:",omitempty"`
	// Environment names the environment a stateless run starts from
	// ("": the host's root); a session's runs use the session's.
	Environment string `json:",omitempty"`
	// OnOutput, if set, receives the output as it comes, a line at a time
	// ("stdout" or "stderr"), from a goroutine of its own: a slow OnOutput
	// never holds the run, and past a bound the later lines are left out
	// (Result.OutputDropped). The Result still carries all of it.
	OnOutput func(stream, line string) `json:"-"`
}

// ranResult is a run's result as it crosses replicas, with its Runs and
// whether its session went.
type ranResult struct {
	*Result
	Runs int  `json:"runs"`
	Gone bool `json:"gone,omitempty"`
}

func ranOf(res *Result) ranResult {
	if res == nil {
		return ranResult{}
	}
	return ranResult{Result: res, Runs: res.Runs, Gone: res.Gone}
}

// Resources is what the run used (report.Resources: a command's result
// carries it too).
type Resources = report.Resources

// OutputDropped counts the output lines a run's stream left out
// (report.OutputDropped: a command's result carries it too).
type OutputDropped = report.OutputDropped

// An execution's result (report documents each). Aliases of types of the
// same names: the OpenAPI and MCP schemas keep their names.
type (
	Result    = report.Result
	ErrorInfo = report.ErrorInfo
)
