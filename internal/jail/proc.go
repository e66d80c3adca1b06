package jail

import "io"

// ProcSpec describes a process to start in a machine.
type ProcSpec struct {
	// Argv is the program and its arguments; Argv[0] is an absolute path
	// inside. Env is its whole environment, Dir its working directory.
	Argv, Env []string
	Dir       string
	// Stdout and Stderr receive its output, each capped at OutputBytes
	// (0: the sandbox's Limits.OutputBytes); past the cap the process is
	// killed. Nil discards.
	Stdout, Stderr io.Writer
	OutputBytes    int64
	// Stdin gives it a pipe as input (Proc.WriteInput); else /dev/null.
	Stdin bool
	// Terminal starts it on a terminal of this size, of the machine's
	// own devpts: its stdin, stdout and stderr and its controlling
	// terminal. What it shows goes to Stdout; WriteInput types into it,
	// Resize changes its size.
	Terminal *WindowSize
	// Root runs it as root inside (uid and gid 0), in a machine with
	// Spec.RootInside; refused in any other.
	Root bool
}

// ProcExit is how a process of a machine ended.
type ProcExit struct {
	// ExitCode is its exit status, or -1 when a signal ended it; Signal
	// is that signal.
	ExitCode, Signal int
	// Truncated: its output was cut at its cap (it was then killed).
	Truncated bool
	// SandboxEnded: the machine ended under it.
	SandboxEnded bool
	// OOMKilled: SIGKILL ended it, or it exited 137 (a shell whose child
	// SIGKILL ended), while the OOM killer ended processes of the
	// machine's cgroup (the machine's memory limit).
	OOMKilled bool
}
