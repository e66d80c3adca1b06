package commands

import (
	"io"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/report"
)

// EventCommand is the event kind of run_command.
const EventCommand = "command"

// CommandRequest asks to run a command line under /bin/sh -c, or a
// program with its arguments.
type CommandRequest struct {
	Command string
	// Argv, instead of Command, runs a program with these arguments (no
	// shell of ours between): Argv[0] is a name or path of an allowed
	// program.
	Argv []string `json:",omitempty"`
	// WorkingDir is relative to the workspace ("" is its root).
	WorkingDir string
	// Env adds variables (not loader or interpreter ones).
	Env map[string]string
	// Timeout is the wall-clock limit (0: the default).
	Timeout time.Duration
	// TimeoutCeiling: Timeout is the caller's ceiling, not a demand: the
	// command runs up to the smaller of it and the service's bound (a
	// machine's lifetime, else SANDBOX_MAX_COMMAND_TIMEOUT) instead of
	// being refused (E2B's timeoutMs 0, "as long as it may").
	TimeoutCeiling bool `json:",omitempty"`
	// SessionID runs the command in that session's workspace; empty runs
	// it in a fresh, empty one.
	SessionID string
	Owner     string
	// OnOutput: as an execution request's.
	OnOutput func(stream, line string) `json:"-"`
	// Streamed, with OnOutput, streams the command's whole output: no
	// amount of it ends the command (a server's log, E2B's processes),
	// and the result keeps the output limit's worth of each stream
	// (Truncated beyond it).
	Streamed bool `json:",omitempty"`
	// OnStart, if set, is called once the command's sandbox runs it (a
	// refused request never calls it).
	OnStart func() `json:"-"`
	// Stdin keeps the command's stdin open for OnInput's CommandInput;
	// without it (and without Terminal) the command reads an empty stdin.
	Stdin bool `json:",omitempty"`
	// Terminal runs the command on a pseudo-terminal of this size (its
	// stdin, stdout and stderr, and its controlling terminal); what it
	// shows comes as stdout, passed on as it comes.
	Terminal *TerminalSize `json:",omitempty"`
	// OnInput, with Stdin or Terminal, is given the command's input just
	// before OnStart.
	OnInput func(*CommandInput) `json:"-"`
	// User is who the command runs as: "" or "user" (the sandbox's user,
	// or the name of its home), or "root": root inside a machine session
	// that has it (RootHome is then its home and working directory).
	User string `json:",omitempty"`
	// Input, when not empty, is written to the command's stdin, which is
	// then closed: Stdin in one piece, for a caller with no stream of
	// input (it travels with a request forwarded to another replica).
	Input string `json:",omitempty"`
}

// TerminalSize is a terminal's size in characters.
type TerminalSize struct {
	Cols, Rows int
}

// Interactive reports whether the command is given input.
func (req CommandRequest) Interactive() bool { return req.Stdin || req.Terminal != nil }

// CommandResult is run_command's result: the seed's fields, and those of an
// execution's result that apply.
type CommandResult struct {
	Success     bool   `json:"success"`
	ExecutionID string `json:"execution_id"`
	ExitCode    int    `json:"exit_code"`
	// Signal is the signal that ended the command's process (ExitCode is
	// then -1): a crash (11, SIGSEGV) or a kill from inside the sandbox.
	Signal        int              `json:"signal,omitempty"`
	Stdout        string           `json:"stdout"`
	Stderr        string           `json:"stderr"`
	ExecutionTime float64          `json:"execution_time"`
	TimedOut      bool             `json:"timed_out"`
	Error         *string          `json:"error"`
	OOMKilled     bool             `json:"oom_killed"`
	Truncated     bool             `json:"truncated"`
	Limit         *string          `json:"limit"`
	Resources     report.Resources `json:"resources"`
	Backend       string           `json:"backend"`
	Isolation     fleet.Layers     `json:"isolation"`

	// OutputDropped: as an execution result's.
	OutputDropped *report.OutputDropped `json:"output_dropped"`
}

// LimitCanceled is CommandResult.Limit of a command ended before its
// end: by its caller, or with its session.
const LimitCanceled = string(fleet.LimitCanceled)

// Daemon is where a session's daemon (an environment's start command)
// writes: its output, unbounded, goes here instead of the result, and
// String is its last words, the result's stderr.
type Daemon interface {
	io.Writer
	String() string
}
