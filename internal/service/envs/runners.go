package envs

import (
	"context"
	"io"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// The commands and packages domains, as far as environments use them. The
// root wires them (envwire.go: runCommand, runDaemon, packages' RunPip),
// so that this package imports neither and a start command or a
// requirements build goes through the very jail, allow-list and limits an
// agent's would.

// CommandRunner runs a command in a session.
type CommandRunner interface {
	RunCommand(ctx context.Context, c Command) (CommandOutcome, error)
}

// Command is a command of a session's: its ready command, or its start
// command as the session's daemon.
type Command struct {
	SessionID, Owner, Command string
	Timeout                   time.Duration // 0: the commands' default
	// Daemon, when set, makes it the session's daemon: it lives as long as
	// the session, and its output, unbounded, goes to Daemon.
	Daemon Tail
	// OnStart is called once its sandbox runs it.
	OnStart func()
}

// Tail takes a daemon's output and keeps its end (String), which says
// why it ended.
type Tail interface {
	io.Writer
	String() string
}

// CommandOutcome is how a command ended.
type CommandOutcome struct {
	Success  bool
	ExitCode int
	// Error says why it failed, Limit which limit killed it (nil: none).
	Error, Limit *string
	Output       string // stdout then stderr
}

// PipRunner installs Python packages.
type PipRunner interface {
	// Precheck answers what pip would answer less clearly, before a
	// sandbox starts; kind is "" when it cannot tell.
	Precheck(ctx context.Context, r policy.Requirement) (kind, msg string)
	// Install runs pip for reqs (checked already) into t.Site and returns
	// pip's output and how it ended.
	Install(ctx context.Context, t PipTarget, reqs []string) (string, fleet.Exit, error)
	// Installed lists the distributions in a package directory.
	Installed(dir string) []Distribution
}

// PipTarget is where and how a build's pip installs.
type PipTarget struct {
	ID   string // names the build in pip's errors
	Site string // the directory pip installs into
	UID  int    // the host uid pip runs as (0: one of its own)
	// Interpreter and Root are the Python and root pip runs on ("": the
	// host's).
	Interpreter, Root string
	Timeout           time.Duration
	MaxInstall        int64
	Log               io.Writer // a copy of pip's output as it comes
}

// Distribution is one installed distribution: its name and its importable
// top-level modules.
type Distribution struct {
	Name    string
	Modules []string
}
