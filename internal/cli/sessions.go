package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/codecage/codecage/internal/service"
)

const sessionsUsage = `Usage:
  codecage sessions list
  codecage sessions show ID
  codecage sessions create [--from-snapshot ID] [--on-timeout kill|pause] [--lifetime D]
                           [--manual-resume] [--profile P] [--use-container]
  codecage sessions exec ID [CODE | - | --file F] [--timeout S] [--language L]
  codecage sessions metrics ID
  codecage sessions logs ID [--level L] [--search S] [--limit N] [--newest-first]
  codecage sessions network ID [--allow-out DEST]... [--deny-out CIDR]...
  codecage sessions credentials ID [--bind JSON]...
  codecage sessions pause ID [--no-memory | --park]
  codecage sessions resume ID
  codecage sessions snapshot ID [--name N]
  codecage sessions fork ID [--count N] [--lifetime D]
  codecage sessions close ID

A client of a running "codecage serve": each subcommand is one call of its
REST API (POST /sessions, /sessions/{id}/execute, /pause, /resume,
/snapshots, /fork, ...). Every subcommand takes --url (default $CODECAGE_URL,
else http://127.0.0.1:8001), --api-key (default $CODECAGE_API_KEY) and
--json (print the server's JSON answer). D is a duration (90s, 10m, 2h) or
seconds. exec runs CODE, standard input (-) or the file F, in the session's
Python interpreter or (--language javascript, typescript or bash) its kernel
of that language. metrics samples the session's CPU, memory and disk; logs
prints its log (its start, pauses, commands, failures and stderr); network
replaces its own egress rules, within the operator's allow list (none: cleared);
credentials binds secrets stored with "codecage secrets create" to hosts: the
egress proxy adds them to the session's HTTPS requests there (none: cleared).

Exit status: 0 success; 1 the code failed (exec; sys.exit(n) gives n);
2 bad usage; 3 the server did not answer; 4 the server refused the request
(its error kind and message are printed).
`

// sessionsCmd is the client of a server's sessions.
func sessionsCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, sessionsUsage)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	c := newClientCmd("sessions "+sub, sessionsUsage, stdout, stderr)
	switch sub {
	case "list":
		return sessionsList(c, rest)
	case "show":
		return sessionsAct(c, rest, http.MethodGet, "")
	case "create":
		return sessionsCreate(c, rest)
	case "exec":
		return sessionsExec(c, rest, stdin)
	case "metrics":
		return sessionsMetrics(c, rest)
	case "logs":
		return sessionsLogs(c, rest)
	case "network":
		return sessionsNetwork(c, rest)
	case "credentials":
		return sessionsCredentials(c, rest)
	case "pause":
		return sessionsPause(c, rest)
	case "resume":
		return sessionsAct(c, rest, http.MethodPost, "/resume")
	case "snapshot":
		return sessionsSnapshot(c, rest)
	case "fork":
		return sessionsFork(c, rest)
	case "close":
		return sessionsAct(c, rest, http.MethodDelete, "")
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, sessionsUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "codecage sessions: unknown subcommand %q\n\n%s", sub, sessionsUsage)
	return exitUsage
}

func sessionsList(c *clientCmd, args []string) int {
	if status, ok := c.parse(args, 0, 0, ""); !ok {
		return status
	}
	data, status, ok := c.call(http.MethodGet, "/sessions", nil, nil)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	return c.printSessionList(data)
}

// sessionsAct is a call on one session without flags of its own (show,
// resume, close).
func sessionsAct(c *clientCmd, args []string, method, suffix string) int {
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	return c.onSession(method, suffix, nil)
}

// onSession calls the route suffix of the session c.args[0] and prints
// its answer: the session's description, or nothing (close).
func (c *clientCmd) onSession(method, suffix string, body any) int {
	id := c.args[0]
	data, status, ok := c.call(method, "/sessions/"+idPath(id)+suffix, nil, body)
	if !ok {
		return status
	}
	switch {
	case c.json:
		c.printJSON(data)
	case data == nil:
		fmt.Fprintf(c.stdout, "%s closed\n", forTerminal(c.stdout, id))
	case suffix == "":
		return c.printSession(data)
	default:
		return c.printSessionState(data)
	}
	return exitOK
}

// sessionsMetrics is GET /sessions/{id}/metrics.
func sessionsMetrics(c *clientCmd, args []string) int {
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	data, status, ok := c.call(http.MethodGet, "/sessions/"+idPath(c.args[0])+"/metrics", nil, nil)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	var m service.SessionMetrics
	if err := json.Unmarshal(data, &m); err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: the server's answer is not a metrics sample: %v\n", c.name, err)
		return exitInternal
	}
	fmt.Fprintf(c.stdout, "cpu     %.2f%% of %d core(s)\nmemory  %s of %s\ndisk    %s of %s\n",
		m.CPUUsedPct, m.CPUCount, byteSize(m.MemUsed), byteSize(m.MemTotal), byteSize(m.DiskUsed), byteSize(m.DiskTotal))
	return exitOK
}

func sessionsPause(c *clientCmd, args []string) int {
	noMemory := c.fs.Bool("no-memory", false, "keep only the workspace files: the sandbox ends, and a resume starts a fresh interpreter")
	park := c.fs.Bool("park", false, "write the paused session, memory included, into the snapshot store now, freeing its memory and slot")
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	body := map[string]any{}
	if *noMemory {
		body["keep_memory"] = false
	}
	if *park {
		body["park"] = true
	}
	return c.onSession(http.MethodPost, "/pause", body)
}
