package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/config"
)

const auditUsage = `Usage:
  codecage audit list [--db PATH] [--limit N] [--kind K] [--key NAME] [--surface S]
                      [--outcome O] [--backend B] [--replica R] [--since DURATION] [--json]
  codecage audit show REF [--db PATH] [--json]
  codecage audit stats [--db PATH] [--since DURATION] [--json]

Reads the audit log the server writes. REF is an execution id or a row id
("42" or "#42"); DURATION is e.g. 90m, 24h or 7d, or an RFC 3339 time.
The database is --db, else $SANDBOX_AUDIT_DB (a file, or a postgres:// URL), else
$XDG_STATE_HOME/codecage/audit.db, else ~/.local/state/codecage/audit.db.
`

// auditCmd reads the audit log: list, show and stats. It only reads, and
// never creates the database.
func auditCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, auditUsage)
		return exitUsage
	}
	switch args[0] {
	case "list":
		return auditList(args[1:], stdout, stderr)
	case "show":
		return auditShow(args[1:], stdout, stderr)
	case "stats":
		return auditStats(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, auditUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "codecage audit: unknown subcommand %q\n\n%s", args[0], auditUsage)
	return exitUsage
}

func auditFlags(name string, stderr io.Writer) (*flag.FlagSet, *string, *bool) {
	fs := flag.NewFlagSet("audit "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, auditUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	db := fs.String("db", "", "the audit database: a file, or a postgres:// URL (default $SANDBOX_AUDIT_DB, else "+audit.DefaultPath()+")")
	asJSON := fs.Bool("json", false, "print JSON")
	return fs, db, asJSON
}

// auditOpenRO opens the database read-only; a missing one is reported, not
// created, since only the server should decide where the log lives.
func auditOpenRO(path string, stderr io.Writer) (audit.Store, int) {
	if path == "" {
		v, err := config.EnvValue("audit_db", os.Getenv)
		if err != nil {
			fmt.Fprintln(stderr, "codecage audit:", err)
			return nil, exitUsage
		}
		path = cmp.Or(v, audit.DefaultPath())
	}
	if audit.IsPostgres(path) {
		s, err := audit.OpenPostgresReadOnly(context.Background(), path, 10*time.Second)
		if err != nil {
			fmt.Fprintln(stderr, "codecage audit:", err)
			return nil, exitFailure
		}
		return s, exitOK
	}
	s, err := audit.OpenSQLiteReadOnly(path)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stderr, "codecage audit: no audit log at %s (the server writes it; SANDBOX_AUDIT_DB sets where)\n", path)
		return nil, exitFailure
	}
	if err != nil {
		fmt.Fprintln(stderr, "codecage audit:", err)
		return nil, exitFailure
	}
	return s, exitOK
}

func auditList(args []string, stdout, stderr io.Writer) int {
	fs, db, asJSON := auditFlags("list", stderr)
	limit := fs.Int("limit", 50, "show at most `N` events (0 = all)")
	kind := fs.String("kind", "", "only events of this kind (execute, validate, command, install, session, file, denied, audit_dropped)")
	key := fs.String("key", "", "only events of this API key")
	surface := fs.String("surface", "", "only events through this surface (rest, mcp, mcp-stdio, cli)")
	outcome := fs.String("outcome", "", "only events with this outcome (success, error, timeout, memory, denied, ...)")
	backend := fs.String("backend", "", "only events whose code this backend ran (native, gvisor)")
	replica := fs.String("replica", "", "only events this replica of a cluster handled")
	var since auditSince
	fs.Var(&since, "since", "only events in the last `DURATION` (90m, 24h, 7d) or since an RFC 3339 time")
	pos, code, ok := auditParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "codecage audit list: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	if *limit < 0 {
		fmt.Fprintln(stderr, "codecage audit list: --limit must not be negative")
		return exitUsage
	}
	s, code := auditOpenRO(*db, stderr)
	if s == nil {
		return code
	}
	defer s.Close()
	evs, err := s.List(context.Background(), audit.Query{Limit: *limit, Kind: *kind, Key: *key,
		Surface: *surface, Outcome: *outcome, Backend: *backend, Replica: *replica, Since: since.t})
	if err != nil {
		fmt.Fprintln(stderr, "codecage audit list:", err)
		return exitFailure
	}
	if *asJSON {
		printJSON(stdout, evs)
		return exitOK
	}
	if len(evs) == 0 {
		fmt.Fprintln(stderr, "codecage audit list: no matching events")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tEXECUTION\tKIND\tKEY\tSURFACE\tPROFILE\tBACKEND\tOUTCOME\tDURATION\tLIMIT\tDETAIL")
	for _, ev := range evs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%dms\t%s\t%s\n",
			ev.Time.Local().Format(time.RFC3339), auditCell(auditRef(ev)), auditCell(ev.Kind), auditCell(ev.Key), auditCell(ev.Surface),
			auditCell(ev.Profile), auditCell(ev.Backend), auditCell(ev.Outcome), ev.Duration.Milliseconds(), auditCell(ev.Limit), auditClip(auditCell(ev.Detail), 60))
	}
	tw.Flush()
	return exitOK
}

func auditShow(args []string, stdout, stderr io.Writer) int {
	fs, db, asJSON := auditFlags("show", stderr)
	pos, code, ok := auditParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "codecage audit show: give one execution id or row id")
		return exitUsage
	}
	s, code := auditOpenRO(*db, stderr)
	if s == nil {
		return code
	}
	defer s.Close()
	evs, err := s.Get(context.Background(), pos[0])
	if errors.Is(err, audit.ErrNotFound) {
		fmt.Fprintf(stderr, "codecage audit show: no event %q in %s\n", pos[0], s.Name())
		return exitFailure
	}
	if err != nil {
		fmt.Fprintln(stderr, "codecage audit show:", err)
		return exitFailure
	}
	if *asJSON {
		printJSON(stdout, evs)
		return exitOK
	}
	for i, ev := range evs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printAuditEvent(stdout, ev)
	}
	return exitOK
}

// printAuditEvent prints every field of ev, the code last and in full.
func printAuditEvent(w io.Writer, ev audit.Event) {
	fmt.Fprintf(w, "event #%d\n", ev.ID)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(name, value string) { fmt.Fprintf(tw, "  %s:\t%s\n", name, value) }
	row("time", ev.Time.Local().Format(time.RFC3339Nano))
	row("kind", auditCell(ev.Kind))
	row("execution id", auditCell(ev.ExecutionID))
	row("key", auditCell(ev.Key))
	row("surface", auditCell(ev.Surface))
	row("profile", auditCell(ev.Profile))
	row("backend", auditCell(ev.Backend))
	if ev.Replica != "" {
		row("replica", auditCell(ev.Replica))
	}
	row("outcome", auditCell(ev.Outcome))
	row("duration", fmt.Sprintf("%s (%d ms)", ev.Duration, ev.Duration.Milliseconds()))
	row("limit", auditCell(ev.Limit))
	sec := make([]string, len(ev.SecurityEvents))
	for i, e := range ev.SecurityEvents {
		sec[i] = auditOneLine(e)
	}
	row("security events", auditCell(strings.Join(sec, ", ")))
	row("detail", auditCell(auditOneLine(ev.Detail)))
	row("remote address", auditCell(ev.RemoteAddr))
	row("code hash", auditCell(ev.CodeHash))
	tw.Flush()
	switch {
	case ev.Code != "":
		fmt.Fprintln(w, "  code:")
		code := strings.TrimSuffix(forTerminal(w, ev.Code), "\n")
		for _, line := range strings.Split(code, "\n") {
			fmt.Fprintln(w, "    "+line)
		}
	case ev.CodeHash != "":
		fmt.Fprintln(w, "  code: (not logged)")
	}
}

func auditStats(args []string, stdout, stderr io.Writer) int {
	fs, db, asJSON := auditFlags("stats", stderr)
	var since auditSince
	fs.Var(&since, "since", "only events in the last `DURATION` (90m, 24h, 7d) or since an RFC 3339 time")
	pos, code, ok := auditParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "codecage audit stats: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	s, code := auditOpenRO(*db, stderr)
	if s == nil {
		return code
	}
	defer s.Close()
	st, err := s.Stats(context.Background(), since.t)
	if err != nil {
		fmt.Fprintln(stderr, "codecage audit stats:", err)
		return exitFailure
	}
	if *asJSON {
		printJSON(stdout, st)
		return exitOK
	}
	period := "all time"
	if !st.Since.IsZero() {
		period = "since " + st.Since.Local().Format(time.RFC3339)
	}
	fmt.Fprintf(stdout, "Audit log %s (%s): %d events\n", s.Name(), period, st.Total)
	if st.Total == 0 {
		return exitOK
	}
	fmt.Fprintf(stdout, "  first %s, last %s\n", st.First.Local().Format(time.RFC3339), st.Last.Local().Format(time.RFC3339))
	if e := st.Executions; e.Count > 0 {
		fmt.Fprintf(stdout, "Executions: %d, duration avg %s, p50 %s, p95 %s, max %s\n",
			e.Count, auditMS(e.Avg), auditMS(e.P50), auditMS(e.P95), auditMS(e.Max))
	}
	// A title line has no tab, so each section's columns align on their own.
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, sec := range []struct {
		title string
		m     map[string]int64
	}{
		{"By kind", st.ByKind},
		{"By outcome", st.ByOutcome},
		{"By key", st.ByKey},
		{"By surface", st.BySurface},
		{"By backend", st.ByBackend},
		{"By replica", st.ByReplica},
		{"Limits hit", st.LimitsHit},
		{"Security events", st.SecurityEvents},
	} {
		if len(sec.m) == 0 {
			continue
		}
		fmt.Fprintln(tw, sec.title+":")
		for _, k := range auditByCount(sec.m) {
			fmt.Fprintf(tw, "  %s\t%d\n", auditCell(k), sec.m[k])
		}
	}
	tw.Flush()
	return exitOK
}

// auditByCount orders a count map's keys by count, largest first, then by name.
func auditByCount(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// auditParseArgs parses flags that may come before, between or after positional
// arguments ("show REF --json"), which flag.Parse alone stops at.
func auditParseArgs(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if code, ok := parse(fs, args); !ok {
			return nil, code, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, exitOK, true
		}
		// After "--" everything is positional.
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), exitOK, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// auditSince is a --since value: a duration back from now (with "d" for
// days, which time.ParseDuration lacks) or an absolute RFC 3339 time.
type auditSince struct {
	t   time.Time
	arg string
}

func (f *auditSince) String() string { return f.arg }

func (f *auditSince) Set(s string) error {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		f.t, f.arg = t, s
		return nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil {
			return fmt.Errorf("not a duration: %q", s)
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("not a duration (90m, 24h, 7d) or RFC 3339 time: %q", s)
		}
	}
	if d <= 0 {
		return fmt.Errorf("duration must be positive: %q", s)
	}
	f.t, f.arg = time.Now().Add(-d), s
	return nil
}

// auditRef names an event the way show accepts it: its execution id, or its row
// id for events that belong to no execution.
func auditRef(ev audit.Event) string {
	if ev.ExecutionID != "" {
		return ev.ExecutionID
	}
	return "#" + strconv.FormatInt(ev.ID, 10)
}

// auditCell shows an empty field as "-" so columns stay aligned and readable.
func auditCell(s string) string {
	if s == "" {
		return "-"
	}
	return auditOneLine(s)
}

// auditOneLine keeps a logged value on one line and free of control bytes: the
// values come from untrusted code and clients, and must not forge rows or
// send escape sequences to the terminal.
func auditOneLine(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == utf8.RuneError:
			return '\uFFFD'
		case unicode.IsControl(r), r == '\u2028', r == '\u2029':
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// auditClip shortens s to at most n runes, marking the cut.
func auditClip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// auditMS shows a duration in milliseconds, with a decimal below 10ms.
func auditMS(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	if f < 10 {
		return strconv.FormatFloat(f, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(f, 'f', 0, 64) + "ms"
}
