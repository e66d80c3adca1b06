package policy

// DefaultCommands are the programs run_command may run unless the operator
// says otherwise (SANDBOX_ALLOWED_COMMANDS). The jail holds only these
// (and /bin/sh, which runs the command line): anything else a pipeline, a
// nested shell or an interpreter tries to start is not there to run.
var DefaultCommands = []string{
	"ls", "cat", "head", "tail", "grep", "find", "wc", "diff", "file", "sort", "uniq", "cut", "tr",
	"sed", "awk", "echo", "pwd", "mkdir", "touch", "cp", "mv", "rm", "tar", "gzip", "python3",
}
