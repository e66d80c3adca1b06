package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
)

const snapshotsUsage = `Usage:
  codecage snapshots list [--session ID] [--name N]
  codecage snapshots rm ID
  codecage snapshots gc [--json] [configuration flags]

list and rm are clients of a running "codecage serve" (GET /snapshots,
DELETE /snapshots/{id}), with the API key's snapshots; they take --url
(default $CODECAGE_URL, else http://127.0.0.1:8001), --api-key (default
$CODECAGE_API_KEY) and --json. gc is the operator's: it opens the snapshot
store of the configuration (SANDBOX_SNAPSHOT_STORE, SANDBOX_STATE_DIR, ...,
as "codecage serve" reads them) and removes expired snapshots and the
leftovers of interrupted writes; snapshots that fail verification are
counted and kept. It is safe while a server uses the store.

Exit status: 0 success; 1 gc failed; 2 bad usage; 3 the server did not
answer; 4 the server refused the request (its error kind and message are
printed).
`

// snapshotsCmd lists and deletes a server's snapshots, and collects the
// configured store's garbage.
func snapshotsCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, snapshotsUsage)
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list":
		return snapshotsList(newClientCmd("snapshots list", snapshotsUsage, stdout, stderr), rest)
	case "rm":
		return snapshotsRm(newClientCmd("snapshots rm", snapshotsUsage, stdout, stderr), rest)
	case "gc":
		return snapshotsGC(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, snapshotsUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "codecage snapshots: unknown subcommand %q\n\n%s", sub, snapshotsUsage)
	return exitUsage
}

func snapshotsList(c *clientCmd, args []string) int {
	session := c.fs.String("session", "", "only the snapshots of this session")
	name := c.fs.String("name", "", "only the snapshot with this name (or id)")
	if status, ok := c.parse(args, 0, 0, ""); !ok {
		return status
	}
	q := url.Values{}
	if *session != "" {
		q.Set("session_id", *session)
	}
	if *name != "" {
		q.Set("name", *name)
	}
	data, status, ok := c.call(http.MethodGet, "/snapshots", q, nil)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	return c.printSnapshotList(data)
}

func snapshotsRm(c *clientCmd, args []string) int {
	if status, ok := c.parse(args, 1, 1, "snapshot id"); !ok {
		return status
	}
	id := c.args[0]
	data, status, ok := c.call(http.MethodDelete, "/snapshots/"+idPath(id), nil, nil)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	fmt.Fprintf(c.stdout, "%s removed\n", c.text(id))
	return exitOK
}
