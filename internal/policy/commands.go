package policy

import "slices"

// DefaultCommands are the programs run_command may run unless the operator
// says otherwise (SANDBOX_ALLOWED_COMMANDS). The jail holds only these
// (and /bin/sh, which runs the command line): anything else a pipeline, a
// nested shell or an interpreter tries to start is not there to run.
var DefaultCommands = []string{
	"ls", "cat", "head", "tail", "grep", "find", "wc", "diff", "file", "sort", "uniq", "cut", "tr",
	"sed", "awk", "echo", "pwd", "mkdir", "touch", "cp", "mv", "rm", "tar", "gzip", "python3",
}

// E2BShellCommands are the programs agents expect in a VM's shell, added
// to the default list when the E2B surface is on (see WithE2BCommands):
// each acts within the sandbox only (its processes, its files, its own
// identity); ps and kill see the command's own processes; stty, tty and
// tput act on the command's own terminal (a terminal's shell needs them).
// git is added where Debian's is installed (a missing program is left out).
var E2BShellCommands = []string{"sleep", "env", "printenv", "id", "whoami", "nproc", "realpath", "ln", "ps", "kill", "git", "stty", "tty", "tput"}

// WithE2BCommands is the command list of a server with the E2B surface
// on: E2B's SDKs run every command as bash -l -c, so bash is added; the
// default list (the operator set none) gains E2BShellCommands too, while
// an operator's own list is kept as it is.
func WithE2BCommands(list []string) []string {
	out := slices.Clone(list)
	if slices.Equal(list, DefaultCommands) {
		for _, c := range E2BShellCommands {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	if !slices.Contains(out, "bash") {
		out = append(out, "bash")
	}
	return out
}
