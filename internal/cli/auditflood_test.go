package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/audit"
)

// floodCode calls tools 3011 times: 3 allowed calls, 8 with a 4 MiB name,
// then 3000 with made-up 1 KiB names. It prints what it was told.
const floodCode = `
big = "calc." + "x" * (4 << 20)
seen = {}
def call(name):
    try:
        tools.call(name, {"a": 1, "b": 2})
        k = "ok"
    except ToolError as e:
        k = "budget" if "budget" in str(e) else "denied" if "not allowed" in str(e) else str(e)[:80]
    seen[k] = seen.get(k, 0) + 1
for i in range(3):
    call("calc.add")
for i in range(8):
    call(big)
for i in range(3000):
    call("calc.nosuch" + "y" * 1000 + str(i))
print(sorted(seen.items()))
`

// postExecute runs code over REST with key and returns the result.
func postExecute(t *testing.T, url, key string, body map[string]any) (id, stdout string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url+"/execute", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return "", ""
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var r struct {
		Success     bool   `json:"success"`
		ExecutionID string `json:"execution_id"`
		Stdout      string `json:"stdout"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil || !r.Success {
		t.Errorf("execute: %d %.2000s", resp.StatusCode, out)
	}
	return r.ExecutionID, r.Stdout
}

// TestCodeModeCannotFloodTheAuditLog: a run that makes thousands of
// refused tool calls, some with 4 MiB names, is held to the tool budget,
// leaves a bounded number of small audit rows and one summary row, and
// does not crowd out another tenant's events, judged from the audit
// database, the server's log and its metrics.
func TestCodeModeCannotFloodTheAuditLog(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "audit.db")
	s := startServe(t, "SANDBOX_TOOLS_CONFIG="+upstreamConfig(t), "SANDBOX_AUDIT_DB="+db,
		"SANDBOX_STATE_DIR="+filepath.Join(dir, "state"), "SANDBOX_TOOLS_MAX_CALLS=5", "SANDBOX_AUDIT_BUFFER=128",
		"SANDBOX_API_KEYS=alice:"+aliceKey+",bob:"+bobKey, "SANDBOX_RATE_LIMIT=0")

	const bobRuns = 20
	var wg sync.WaitGroup
	var floodID, floodOut string
	wg.Go(func() {
		floodID, floodOut = postExecute(t, s.url, aliceKey, map[string]any{"code": floodCode, "tools": []string{"calc.add"}, "timeout": 120})
	})
	wg.Go(func() {
		for range bobRuns {
			postExecute(t, s.url, bobKey, map[string]any{"code": "print(6 * 7)"})
		}
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Refused calls count against the budget: the 4th and 5th call are
	// refused for their names, every later one for the budget.
	if want := "[('budget', 3006), ('denied', 2), ('ok', 3)]\n"; floodOut != want {
		t.Errorf("the code was told %q, want %q", floodOut, want)
	}
	resp, err := func() (*http.Response, error) {
		req, _ := http.NewRequest("GET", s.url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		return http.DefaultClient.Do(req)
	}()
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^sandbox_audit_events_dropped_total 0$`).Match(metrics) {
		t.Errorf("audit events were dropped: %s", regexp.MustCompile(`(?m)^sandbox_audit_events_dropped_total .*$`).Find(metrics))
	}

	store, err := audit.OpenSQLiteReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	var rows, bob []audit.Event
	// The recorder writes within a gather window: wait for the flood's
	// execute row (the run's last) and for every one of bob's, which may
	// land after it.
	for range 100 {
		rows, err = store.Get(ctx, floodID)
		if err == nil {
			bob, err = store.List(ctx, audit.Query{Key: "bob", Kind: audit.KindExecute})
		}
		if err == nil && len(rows) > 0 && rows[len(rows)-1].Kind == audit.KindExecute && len(bob) >= bobRuns {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	// 3 calls, 2 refused by name, 32 over the budget, one summary, and
	// the execution itself.
	outcomes := map[string]int{}
	size := 0
	var summary, bigName []string
	for _, ev := range rows {
		outcomes[ev.Kind+"/"+ev.Outcome]++
		size += len(ev.Code) + len(ev.Detail) + len(strings.Join(ev.SecurityEvents, ""))
		if strings.Contains(ev.Detail, "more") {
			summary = append(summary, ev.Detail)
		}
		if strings.HasPrefix(ev.Code, "calc.xxx") {
			bigName = append(bigName, ev.Code)
		}
	}
	want := map[string]int{"tool_call/success": 3, "tool_call/denied": 2, "tool_call/budget": 33, "execute/success": 1}
	for k, n := range want {
		if outcomes[k] != n {
			t.Errorf("%d rows %s, want %d (all: %v)", outcomes[k], k, n, outcomes)
		}
	}
	if len(rows) != 39 || size > 64<<10 {
		t.Errorf("the run left %d rows of %d bytes; want 39 rows, at most 64 KiB", len(rows), size)
	}
	if len(summary) != 1 || !strings.HasPrefix(summary[0], "and 2974 more tool calls over the budget") {
		t.Errorf("summary rows: %q", summary)
	}
	if len(bigName) != 8 {
		t.Errorf("%d rows name the 4 MiB tool, want 8 (2 refused by name, 6 over the budget)", len(bigName))
	}
	for _, name := range bigName {
		if len(name) > 256 || !strings.HasSuffix(name, "… (4194309 bytes)") {
			t.Fatalf("the 4 MiB name is stored as %d bytes ending %q", len(name), name[max(0, len(name)-40):])
		}
	}
	// The other tenant lost nothing.
	if len(bob) != bobRuns {
		t.Errorf("bob's execute rows: %d, want %d", len(bob), bobRuns)
	}
	if dropped, err := store.List(ctx, audit.Query{Kind: audit.KindAuditDropped}); err != nil || len(dropped) != 0 {
		t.Errorf("audit_dropped rows: %v %v", err, dropped)
	}
	// The database and the server's log stayed small.
	var onDisk int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(db + suffix); err == nil {
			onDisk += fi.Size()
		}
	}
	if onDisk > 8<<20 {
		t.Errorf("the audit database takes %d bytes", onDisk)
	}
	log := s.stderr.String()
	if len(log) > 256<<10 || strings.Contains(log, strings.Repeat("x", 300)) || strings.Contains(log, strings.Repeat("y", 300)) {
		t.Errorf("the server log holds %d bytes, with the code's names: %v", len(log), strings.Contains(log, strings.Repeat("x", 300)))
	}
}
