// Package cli implements the codecage command line: flags in, calls to the
// sandbox service (serve and mcp: to internal/server, which assembles it),
// text or JSON out.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Exit statuses of the command.
const (
	exitOK       = 0
	exitFailure  = 1 // the code failed (exception, limit, crash)
	exitUsage    = 2 // bad flags or input
	exitInternal = 3 // the sandbox could not run; a client command: the server did not answer
	exitRefused  = 4 // a client command (sessions, snapshots): the server refused the request
)

const usage = `codecage runs untrusted Python behind a kernel boundary.

Usage:
  codecage serve [--listen ADDR]    serve REST, MCP (/mcp, /mcp/sse) and metrics on 127.0.0.1:8001
  codecage mcp                      serve MCP over stdio
  codecage run [flags] [file]       run Python code from --code, a file, or stdin
  codecage validate [flags] [file]  check code without running it
  codecage info [--json]            profiles, limits and isolation of this configuration
  codecage doctor                   report the isolation layers of this host
  codecage bench [--json] [--quick] measure latency, throughput, HumanEval and memory
  codecage openapi                  print the REST API's OpenAPI 3.1 document
  codecage packages install|list    the operator's package layer, importable in every sandbox
  codecage env build|list|show|rm|gc  environments: read-only roots runs and sessions start from
  codecage audit list|show|stats    read the audit log
  codecage sessions list|show|create|exec|network|credentials|pause|resume|snapshot|fork|close
                                    a running server's sessions, through its REST API
  codecage snapshots list|rm|gc     a running server's snapshots; gc: collect the store's
  codecage secrets create|list|rm   a running server's secrets, added at its egress proxy
  codecage help                     show this help

Every command takes the operator settings as flags (e.g. --timeout,
--enable-data-science), as SANDBOX_* variables, or from --config FILE;
run "codecage run -h" to list them. sessions, secrets and snapshots list|rm are
clients of a running server: --url (or CODECAGE_URL), --api-key (or
CODECAGE_API_KEY); run "codecage sessions help".
`

// Main runs the command line and returns the exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdin, stdout, stderr)
	case "mcp":
		return mcpCmd(args[1:], stdin, stdout, stderr)
	case "serve":
		return serveCmd(args[1:], stdout, stderr)
	case "info":
		return infoCmd(args[1:], stdout, stderr)
	case "validate":
		return validateCmd(args[1:], stdin, stdout, stderr)
	case "doctor":
		return doctorCmd(args[1:], stdout, stderr)
	case "packages":
		return packagesCmd(args[1:], stdout, stderr)
	case "env":
		return envCmd(args[1:], stdout, stderr)
	case "openapi":
		return openapiCmd(args[1:], stdout, stderr)
	case "bench":
		return benchCmd(args[1:], stdout, stderr)
	case "audit":
		return auditCmd(args[1:], stdout, stderr)
	case "sessions":
		return sessionsCmd(args[1:], stdin, stdout, stderr)
	case "snapshots":
		return snapshotsCmd(args[1:], stdout, stderr)
	case "secrets":
		return secretsCmd(args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "codecage: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// parse parses a command's flags; when it returns false the command ends
// with the status it gives (0 for -h, 2 for bad flags).
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}
