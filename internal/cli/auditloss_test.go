package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/probe"

	"github.com/codecage/codecage/internal/audit"
)

// readiness returns GET /ready's status and its audit_log check.
func readiness(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("/ready: %d %q", resp.StatusCode, b)
	}
	return resp.StatusCode, body.Checks["audit_log"]
}

// waitReadiness polls /ready until its audit_log check matches want.
func waitReadiness(t *testing.T, url string, want func(status int, check string) bool) (int, string) {
	t.Helper()
	var status int
	var check string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, check = readiness(t, url); want(status, check) {
			break
		}
	}
	return status, check
}

// auditRows counts the rows on disk of the audit database at path.
func auditRows(t *testing.T, path string) int {
	t.Helper()
	store, err := audit.OpenSQLiteReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	st, err := store.Stats(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Total)
}

func auditServe(t *testing.T, db string) *server {
	return startServe(t, "SANDBOX_AUDIT_DB="+db, "SANDBOX_STATE_DIR="+t.TempDir(), "SANDBOX_POOL_SIZE=1", "SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0")
}

// TestAuditDatabaseDeletedWhileServing: the database file removed under a
// running server (SQLite would go on writing to the unlinked file, which
// no path leads to) turns /ready red saying so, and the events are counted
// as lost, not as written.
func TestAuditDatabaseDeletedWhileServing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "audit.db")
	s := auditServe(t, db)
	postExecute(t, s.url, "", map[string]any{"code": "print(1)"})
	if status, check := waitReadiness(t, s.url, func(st int, _ string) bool { return st == 200 }); status != 200 || check != "ok" {
		t.Fatalf("before: /ready %d, audit_log %q", status, check)
	}
	for deadline := time.Now().Add(10 * time.Second); auditRows(t, db) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	written := probe.Metric(t, s.url, "sandbox_audit_events_written_total")
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		postExecute(t, s.url, "", map[string]any{"code": "print(2)"})
	}
	status, check := waitReadiness(t, s.url, func(st int, _ string) bool { return st == 503 })
	if status != 503 || !strings.Contains(check, "deleted or replaced") || !strings.Contains(check, db) {
		t.Errorf("after the file was deleted: /ready %d, audit_log %q (want 503 naming the file and what happened)", status, check)
	}
	for deadline := time.Now().Add(10 * time.Second); probe.Metric(t, s.url, "sandbox_audit_events_dropped_total") < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if n := probe.Metric(t, s.url, "sandbox_audit_events_dropped_total"); n < 3 {
		t.Errorf("dropped_total %v after 3 executions with no file to keep them", n)
	}
	if n := probe.Metric(t, s.url, "sandbox_audit_errors_total"); n == 0 {
		t.Error("errors_total 0 after writes to a deleted file")
	}
	if n := probe.Metric(t, s.url, "sandbox_audit_events_written_total"); n != written {
		t.Errorf("written_total went from %v to %v with no file on disk", written, n)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file is back at %s: %v", db, err)
	}
}

// TestAuditFullDiskTurnsReadinessRed: the audit database on a small tmpfs
// the test fills: writes fail, the loss is counted, /ready says the log
// is not being kept; once space is freed the next write succeeds, the log
// records the gap, and /ready is green again.
func TestAuditFullDiskTurnsReadinessRed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the test mounts a small tmpfs: it needs root")
	}
	disk := t.TempDir()
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) }) // after serve stops (cleanups run last first)
	db := filepath.Join(disk, "audit.db")
	s := auditServe(t, db)
	postExecute(t, s.url, "", map[string]any{"code": "print(1)"})
	for deadline := time.Now().Add(10 * time.Second); auditRows(t, db) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	// Fill what is left.
	filler := filepath.Join(disk, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	rowsBefore := auditRows(t, db)
	// Each event carries its code: 200 KB each outgrows what SQLite has
	// allocated already.
	big := "x = '" + strings.Repeat("a", 200<<10) + "'\nprint(len(x))"
	for range 6 {
		postExecute(t, s.url, "", map[string]any{"code": big})
	}
	status, check := waitReadiness(t, s.url, func(st int, _ string) bool { return st == 503 })
	if status != 503 || !strings.Contains(check, "dropped") || !strings.Contains(check, "full") {
		t.Errorf("disk full: /ready %d, audit_log %q (want 503 saying events are dropped, and why)", status, check)
	}
	if n := probe.Metric(t, s.url, "sandbox_audit_events_dropped_total"); n == 0 {
		t.Error("dropped_total 0 with a full disk")
	}
	if n := auditRows(t, db); n != rowsBefore {
		t.Errorf("rows on disk went from %d to %d on a full disk: the test did not fill it", rowsBefore, n)
	}
	// Space again: the next event is written with a record of the gap.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	postExecute(t, s.url, "", map[string]any{"code": "print(3)"})
	if status, check := waitReadiness(t, s.url, func(st int, _ string) bool { return st == 200 }); status != 200 || check != "ok" {
		t.Errorf("space freed: /ready %d, audit_log %q", status, check)
	}
	store, err := audit.OpenSQLiteReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if evs, err := store.List(context.Background(), audit.Query{Kind: audit.KindAuditDropped}); err != nil || len(evs) == 0 {
		t.Errorf("no audit_dropped record of the gap: %v %v", evs, err)
	}
}

// TestServeRefusesAnAuditTableOfAnotherShape: a database with this
// program's user_version but another events table is refused at start,
// with an error that says so, instead of serving and dropping every event.
func TestServeRefusesAnAuditTableOfAnotherShape(t *testing.T) {
	dir := t.TempDir()
	for name, ddl := range map[string]string{
		"other columns": "CREATE TABLE events (id INTEGER PRIMARY KEY, message TEXT)",
		"no table":      "CREATE TABLE something_else (id INTEGER PRIMARY KEY)",
	} {
		db := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".db")
		conn, err := sql.Open("sqlite", db)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{ddl, "PRAGMA user_version = 3"} {
			if _, err := conn.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "serve", "--listen", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), cliMainEnv+"=1", "SANDBOX_AUDIT_DB="+db, "SANDBOX_STATE_DIR="+t.TempDir(), "SANDBOX_POOL_SIZE=0", "SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0")
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("%s: serve started (still running after 30 s): %.500s", name, out)
		}
		if err == nil || !strings.Contains(string(out), "not an audit log of this program") || !strings.Contains(string(out), db) {
			t.Errorf("%s: want a refusal naming the file, got %v: %.500s", name, err, out)
		}
	}
}
