package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// sessionsLogs is GET /sessions/{id}/logs: one line per entry, its time,
// level and message, then its fields as key=value.
func sessionsLogs(c *clientCmd, args []string) int {
	level := c.fs.String("level", "", "the least severe level shown: debug, info, warn or error")
	search := c.fs.String("search", "", "only entries whose message holds this text")
	limit := c.fs.Int("limit", 0, "the most entries shown (at most 1000, the default)")
	newest := c.fs.Bool("newest-first", false, "newest first (default: oldest first)")
	if status, ok := c.parse(args, 1, 1, "session id"); !ok {
		return status
	}
	q := url.Values{}
	if *level != "" {
		q.Set("level", *level)
	}
	if *search != "" {
		q.Set("search", *search)
	}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	if *newest {
		q.Set("direction", "backward")
	}
	data, status, ok := c.call(http.MethodGet, "/sessions/"+idPath(c.args[0])+"/logs", q, nil)
	if !ok {
		return status
	}
	if c.json {
		c.printJSON(data)
		return exitOK
	}
	var out struct {
		Logs []service.LogEntry `json:"logs"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		fmt.Fprintf(c.stderr, "codecage %s: the server's answer is not a log: %v\n", c.name, err)
		return exitInternal
	}
	for _, e := range out.Logs {
		line := fmt.Sprintf("%s %-5s %s", e.Time.UTC().Format(time.RFC3339Nano), e.Level, e.Message)
		keys := make([]string, 0, len(e.Fields))
		for k := range e.Fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			line += " " + k + "=" + strconv.Quote(e.Fields[k])
		}
		// The sandbox's code chose most of it: one line per entry, and no
		// control character reaches a terminal.
		fmt.Fprintln(c.stdout, forTerminal(c.stdout, strings.ReplaceAll(line, "\n", `\n`)))
	}
	return exitOK
}
