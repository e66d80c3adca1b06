package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/audit"
)

// auditDB writes a small audit log and returns its path.
func auditDB(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "audit.db")
	s, err := audit.OpenSQLite(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	code := "import socket\nsocket.create_connection(('example.com', 80))\n"
	evs := []audit.Event{
		{Time: base, Kind: "execute", ExecutionID: "exec-old", Key: "alice", Surface: "rest", Profile: "basic",
			CodeHash: audit.HashCode("print(1)"), Code: "print(1)", Outcome: "success", Duration: 42 * time.Millisecond},
		{Time: base.Add(time.Hour), Kind: "denied", Surface: "rest", Outcome: "denied", Detail: "401 unknown key\n\x1b[2Jforged row", RemoteAddr: "10.0.0.7:4242"},
		{Time: base.Add(90 * time.Minute), Kind: "execute", ExecutionID: "exec-new", Key: "bob", Surface: "mcp", Profile: "network",
			CodeHash: audit.HashCode(code), Code: code, Outcome: "timeout", Duration: 5 * time.Second, Limit: "timeout",
			SecurityEvents: []string{"egress_denied:example.com"}, Detail: "killed at the time limit"},
		{Time: base.Add(91 * time.Minute), Kind: "file", ExecutionID: "exec-new", Key: "bob", Surface: "mcp", Outcome: "success", Detail: "read data.csv"},
	}
	if err := s.Append(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuditList(t *testing.T) {
	p := auditDB(t)
	code, out, errOut := cli(t, "", "audit", "list", "--db", p)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("want a header and 4 events:\n%s", out)
	}
	// Newest first; an event without an execution shows its row id.
	for i, want := range []string{"exec-new", "exec-new", "#2", "exec-old"} {
		if f := strings.Fields(lines[i+1]); len(f) < 2 || f[1] != want {
			t.Errorf("line %d: %q, want %s in the second column", i+1, lines[i+1], want)
		}
	}
	if !strings.Contains(lines[1], "file") || !strings.Contains(lines[2], "timeout") || !strings.Contains(lines[2], "5000ms") {
		t.Errorf("fields missing:\n%s", out)
	}
	// Untrusted text cannot break a row or reach the terminal raw.
	if strings.Contains(out, "\x1b") || !strings.Contains(lines[3], "forged row") {
		t.Errorf("detail not kept on its line:\n%q", out)
	}
	if f := strings.Fields(lines[3]); f[3] != "-" {
		t.Errorf("missing key shown as %q, want -", f[3])
	}

	// Filters and --limit.
	_, out, _ = cli(t, "", "audit", "list", "--db", p, "--key", "bob", "--kind", "execute")
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, "exec-new") {
		t.Errorf("--key bob --kind execute:\n%s", out)
	}
	_, out, _ = cli(t, "", "audit", "list", "--db", p, "--limit", "1")
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, " file ") {
		t.Errorf("--limit 1:\n%s", out)
	}
	_, out, _ = cli(t, "", "audit", "list", "--db", p, "--since", "90m")
	if strings.Contains(out, "exec-old") || !strings.Contains(out, "#2") {
		t.Errorf("--since 90m:\n%s", out)
	}
	_, out, _ = cli(t, "", "audit", "list", "--db", p, "--surface", "rest", "--outcome", "denied")
	if n := strings.Count(out, "\n"); n != 2 || !strings.Contains(out, "#2") {
		t.Errorf("--surface rest --outcome denied:\n%s", out)
	}
	code, out, errOut = cli(t, "", "audit", "list", "--db", p, "--kind", "install")
	if code != exitOK || out != "" || errOut == "" {
		t.Errorf("no match: exit %d stdout %q stderr %q", code, out, errOut)
	}
}

func TestAuditListJSON(t *testing.T) {
	p := auditDB(t)
	code, out, errOut := cli(t, "", "audit", "list", "--db", p, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var evs []audit.Event
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		t.Fatalf("not a JSON array of events: %v\n%s", err, out)
	}
	if len(evs) != 4 || evs[0].Kind != "file" || evs[3].ExecutionID != "exec-old" || evs[1].SecurityEvents[0] != "egress_denied:example.com" {
		t.Fatalf("events: %+v", evs)
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "time", "kind", "execution_id", "key", "surface", "profile", "code_hash", "code", "outcome", "duration_ns", "limit", "security_events", "detail"} {
		if _, ok := raw[1][k]; !ok {
			t.Errorf("JSON event lacks %q: %v", k, raw[1])
		}
	}
	// No match is an empty array, not null.
	_, out, _ = cli(t, "", "audit", "list", "--db", p, "--json", "--kind", "install")
	if strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty --json list: %q", out)
	}
}

func TestAuditShow(t *testing.T) {
	p := auditDB(t)
	// Flags may follow the reference.
	code, out, errOut := cli(t, "", "audit", "show", "exec-new", "--db", p)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"exec-new", "socket.create_connection(('example.com', 80))", audit.HashCode("import socket\nsocket.create_connection(('example.com', 80))\n"),
		"egress_denied:example.com", "killed at the time limit", "timeout", "network", "bob", "read data.csv"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "event #") != 2 {
		t.Errorf("want both events of the execution:\n%s", out)
	}

	for _, ref := range []string{"2", "#2"} {
		code, out, _ = cli(t, "", "audit", "show", "--db", p, ref)
		if code != exitOK || !strings.Contains(out, "10.0.0.7:4242") || !strings.Contains(out, "event #2") {
			t.Errorf("show %s: exit %d\n%s", ref, code, out)
		}
	}

	code, out, _ = cli(t, "", "audit", "show", "--db", p, "--json", "exec-old")
	var evs []audit.Event
	if err := json.Unmarshal([]byte(out), &evs); err != nil || code != exitOK {
		t.Fatalf("show --json: exit %d, %v\n%s", code, err, out)
	}
	if len(evs) != 1 || evs[0].Code != "print(1)" || evs[0].Duration != 42*time.Millisecond {
		t.Fatalf("show --json: %+v", evs)
	}

	code, out, errOut = cli(t, "", "audit", "show", "--db", p, "exec-missing")
	if code != exitFailure || out != "" || !strings.Contains(errOut, "exec-missing") {
		t.Fatalf("missing event: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if code, _, _ = cli(t, "", "audit", "show", "--db", p); code != exitUsage {
		t.Fatalf("show without a reference: exit %d", code)
	}
	if code, _, _ = cli(t, "", "audit", "show", "--db", p, "a", "b"); code != exitUsage {
		t.Fatalf("show with two references: exit %d", code)
	}
}

func TestAuditStats(t *testing.T) {
	p := auditDB(t)
	code, out, errOut := cli(t, "", "audit", "stats", "--db", p)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"4 events", "Executions: 2", "p95 5000ms", "execute  2", "timeout  1", "egress_denied  1", "-      1", "bob    2"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = cli(t, "", "audit", "stats", "--db", p, "--json", "--since", "90m")
	var st audit.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != exitOK {
		t.Fatalf("stats --json: exit %d, %v\n%s", code, err, out)
	}
	if st.Total != 3 || st.ByKind["execute"] != 1 || st.ByKey["bob"] != 2 || st.LimitsHit["timeout"] != 1 ||
		st.SecurityEvents["egress_denied"] != 1 || st.Executions.P50 != 5*time.Second || st.Since.IsZero() {
		t.Fatalf("stats --json --since 90m: %+v", st)
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(out), &raw)
	for _, k := range []string{"total", "first", "last", "by_kind", "by_outcome", "by_key", "by_surface", "limits_hit", "security_events", "executions"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stats JSON lacks %q", k)
		}
	}
}

func TestAuditMissingDatabase(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state", "audit.db")
	for _, args := range [][]string{
		{"audit", "list", "--db", p},
		{"audit", "show", "x", "--db", p},
		{"audit", "stats", "--db", p},
	} {
		code, out, errOut := cli(t, "", args...)
		if code != exitFailure || out != "" || !strings.Contains(errOut, "no audit log at "+p) || !strings.Contains(errOut, "SANDBOX_AUDIT_DB") {
			t.Errorf("%v: exit %d stdout %q stderr %q", args, code, out, errOut)
		}
	}
	if _, err := os.Stat(filepath.Dir(p)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reading created %s (%v)", filepath.Dir(p), err)
	}

	// The default comes from SANDBOX_AUDIT_DB.
	t.Setenv("SANDBOX_AUDIT_DB", p)
	if code, _, errOut := cli(t, "", "audit", "list"); code != exitFailure || !strings.Contains(errOut, p) {
		t.Fatalf("default path: exit %d, %s", code, errOut)
	}
	t.Setenv("SANDBOX_AUDIT_DB", auditDB(t))
	if code, out, _ := cli(t, "", "audit", "list"); code != exitOK || !strings.Contains(out, "exec-new") {
		t.Fatalf("SANDBOX_AUDIT_DB: exit %d\n%s", code, out)
	}
}

func TestAuditUsage(t *testing.T) {
	p := auditDB(t)
	for _, args := range [][]string{
		{"audit"},
		{"audit", "frobnicate"},
		{"audit", "list", "--db", p, "--nope"},
		{"audit", "list", "--db", p, "extra"},
		{"audit", "list", "--db", p, "--limit", "-1"},
		{"audit", "list", "--db", p, "--since", "yesterday"},
		{"audit", "list", "--db", p, "--since", "-1h"},
		{"audit", "stats", "--db", p, "extra"},
	} {
		if code, _, _ := cli(t, "", args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, out, _ := cli(t, "", "audit", "help"); code != exitOK || !strings.Contains(out, "audit show REF") {
		t.Errorf("audit help: exit %d\n%s", code, out)
	}
	if code, _, _ := cli(t, "", "audit", "list", "-h"); code != exitOK {
		t.Errorf("audit list -h: exit %d", code)
	}
	if _, out, _ := cli(t, "", "help"); !strings.Contains(out, "codecage audit list|show|stats") {
		t.Errorf("main usage lacks the audit command:\n%s", out)
	}
	// --since takes days and absolute times too.
	if code, _, errOut := cli(t, "", "audit", "list", "--db", p, "--since", "7d"); code != exitOK {
		t.Errorf("--since 7d: exit %d %s", code, errOut)
	}
	if code, out, _ := cli(t, "", "audit", "list", "--db", p, "--since", time.Now().Add(time.Hour).Format(time.RFC3339)); code != exitOK || out != "" {
		t.Errorf("--since in the future: exit %d\n%s", code, out)
	}
}
