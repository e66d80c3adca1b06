package cli

import (
	"flag"
	"net/http"
)

// sessionsSnapshot is POST /sessions/{id}/snapshots; it prints the
// snapshot's id (and on stderr what of the state was not saved).
func sessionsSnapshot(c *clientCmd, args []string) int {
	name := c.fs.String("name", "", "a name for the snapshot (\"snapshots list\" shows it)")
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	body := map[string]any{}
	if *name != "" {
		body["name"] = *name
	}
	data, status, ok := c.call(http.MethodPost, "/sessions/"+idPath(c.args[0])+"/snapshots", nil, body)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	return c.printSnapshotMade(data)
}

// sessionsFork is POST /sessions/{id}/fork; it prints each copy's session
// id, one a line, and each copy that failed on stderr.
func sessionsFork(c *clientCmd, args []string) int {
	count := c.fs.Int("count", 0, "how many copies (the server's default: 1; at most 100)")
	lifetime := secondsValue(c.fs, "lifetime", "each copy's lifetime (90s, 10m, 2h, or seconds; default: a session's)")
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	body := map[string]any{}
	visited := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { visited[f.Name] = true })
	if visited["count"] {
		body["count"] = *count
	}
	if *lifetime != 0 {
		body["lifetime"] = *lifetime
	}
	data, status, ok := c.call(http.MethodPost, "/sessions/"+idPath(c.args[0])+"/fork", nil, body)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
	}
	return c.printForks(data, !c.json)
}
