package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// The persistence routes (#26) on a real server with real sandboxes: each
// one's success, and its refusals through the one status table.

type sessionInfo struct {
	ID           string  `json:"session_id"`
	State        string  `json:"state"`
	PausedAt     *string `json:"paused_at"`
	OnTimeout    string  `json:"on_timeout"`
	AutoResume   bool    `json:"auto_resume"`
	FromSnapshot string  `json:"from_snapshot"`
}

type snapshotInfo struct {
	ID        string   `json:"snapshot_id"`
	Name      string   `json:"name"`
	SessionID string   `json:"session_id"`
	SizeBytes int64    `json:"size_bytes"`
	NotSaved  []string `json:"not_saved"`
}

// noPools keeps the only sandboxes of a test its sessions' own.
func noPools(c *config.Config) {
	c.PoolSize, c.DataPoolSize, c.SessionPoolSize, c.MachinePoolSize = 0, 0, 0, 0
}

// openSession opens a session as key with body, failing the test if it
// is not created.
func (ts *testServer) openSession(t *testing.T, key string, body any) sessionInfo {
	t.Helper()
	var info sessionInfo
	if resp := ts.call(t, "POST", "/sessions", key, body, &info); resp.StatusCode != http.StatusCreated || info.ID == "" {
		t.Fatalf("POST /sessions %v: status %d", body, resp.StatusCode)
	}
	t.Cleanup(func() { ts.call(t, "DELETE", "/sessions/"+info.ID, key, nil, nil) })
	return info
}

// run executes code in a session and returns its stdout, failing the test
// when the run does not succeed.
func (ts *testServer) run(t *testing.T, key, id, code string) string {
	t.Helper()
	var r result
	resp := ts.call(t, "POST", "/execute", key, map[string]any{"code": code, "session_id": id}, &r)
	if resp.StatusCode != http.StatusOK || !r.Success {
		t.Fatalf("execute %q in %s: status %d, %+v", code, id, resp.StatusCode, r)
	}
	return r.Stdout
}

func TestPauseAndResumeKeepVariablesAndFiles(t *testing.T) {
	ts := startServer(t, twoKeys, noPools)
	s := ts.openSession(t, aliceKey, map[string]any{})
	if s.State != "running" || !s.AutoResume || s.OnTimeout != "kill" {
		t.Fatalf("a new session: %+v", s)
	}
	ts.run(t, aliceKey, s.ID, "x = 41\nopen('kept.txt', 'w').write('kept')")

	var paused sessionInfo
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, nil, &paused); resp.StatusCode != http.StatusOK {
		t.Fatalf("pause: status %d", resp.StatusCode)
	}
	if paused.State != "paused" || paused.PausedAt == nil || paused.ID != s.ID {
		t.Fatalf("paused session: %+v", paused)
	}
	var got sessionInfo
	ts.call(t, "GET", "/sessions/"+s.ID, aliceKey, nil, &got)
	if got.State != "paused" {
		t.Fatalf("GET of a paused session says %q", got.State)
	}
	wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, map[string]any{}, nil), http.StatusConflict, "session_paused")

	var resumed sessionInfo
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/resume", aliceKey, nil, &resumed); resp.StatusCode != http.StatusOK || resumed.State != "running" {
		t.Fatalf("resume: status %d, %+v", resp.StatusCode, resumed)
	}
	if out := ts.run(t, aliceKey, s.ID, "print(x + 1, open('kept.txt').read())"); out != "42 kept\n" {
		t.Fatalf("after the resume: %q", out)
	}
	// A resume of a running session leaves it as it is.
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/resume", aliceKey, nil, &resumed); resp.StatusCode != http.StatusOK || resumed.State != "running" {
		t.Fatalf("resume of a running session: status %d, %+v", resp.StatusCode, resumed)
	}

	// With auto_resume (the default) the next request resumes it.
	ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, map[string]any{"keep_memory": true}, nil)
	if out := ts.run(t, aliceKey, s.ID, "x += 1\nprint(x)"); out != "42\n" {
		t.Fatalf("an execute on the paused session: %q", out)
	}
	ts.call(t, "GET", "/sessions/"+s.ID, aliceKey, nil, &got)
	if got.State != "running" {
		t.Fatalf("after the auto resume the session is %q", got.State)
	}
}

func TestPauseRefusals(t *testing.T) {
	ts := startServer(t, twoKeys, noPools)
	s := ts.openSession(t, aliceKey, map[string]any{"auto_resume": false})
	if s.AutoResume {
		t.Fatalf("auto_resume false: %+v", s)
	}
	for _, path := range []string{"/pause", "/resume"} {
		wantProblem(t, ts.call(t, "POST", "/sessions/nosuch"+path, aliceKey, nil, nil), http.StatusNotFound, "session_not_found")
		wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+path, bobKey, nil, nil), http.StatusNotFound, "session_not_found")
	}
	wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, `{"keep_memory": "yes"}`, nil), http.StatusUnprocessableEntity, "invalid_request")
	ts.run(t, aliceKey, s.ID, "y = 7")
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	// Without auto_resume a paused session answers only a resume.
	wantProblem(t, ts.call(t, "POST", "/execute", aliceKey, map[string]any{"code": "print(y)", "session_id": s.ID}, nil), http.StatusConflict, "session_paused")
	// Bob cannot resume it either: it stays paused.
	var got sessionInfo
	ts.call(t, "GET", "/sessions/"+s.ID, aliceKey, nil, &got)
	if got.State != "paused" {
		t.Fatalf("after refused calls the session is %q", got.State)
	}
	ts.call(t, "POST", "/sessions/"+s.ID+"/resume", aliceKey, nil, nil)
	if out := ts.run(t, aliceKey, s.ID, "print(y)"); out != "7\n" {
		t.Fatalf("after the resume: %q", out)
	}
	wantProblem(t, ts.call(t, "POST", "/sessions", aliceKey, map[string]any{"on_timeout": "sleep"}, nil), http.StatusUnprocessableEntity, "invalid_request")
}

func TestSnapshotsAndSessionsFromThem(t *testing.T) {
	ts := startServer(t, twoKeys, noPools)
	s := ts.openSession(t, aliceKey, map[string]any{})
	ts.run(t, aliceKey, s.ID, "x = 41\nopen('shared.txt', 'w').write('before')")

	var snap snapshotInfo
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/snapshots", aliceKey, map[string]any{"name": "first"}, &snap); resp.StatusCode != http.StatusCreated {
		t.Fatalf("snapshot: status %d", resp.StatusCode)
	}
	if snap.ID == "" || snap.Name != "first" || snap.SessionID != s.ID || snap.SizeBytes <= 0 {
		t.Fatalf("snapshot: %+v", snap)
	}
	t.Cleanup(func() { ts.call(t, "DELETE", "/snapshots/"+snap.ID, aliceKey, nil, nil) })
	// The session keeps running.
	if out := ts.run(t, aliceKey, s.ID, "print(x)"); out != "41\n" {
		t.Fatalf("the snapshotted session: %q", out)
	}

	from := ts.openSession(t, aliceKey, map[string]any{"from_snapshot": snap.ID})
	if from.FromSnapshot != snap.ID {
		t.Fatalf("a session from the snapshot: %+v", from)
	}
	if out := ts.run(t, aliceKey, from.ID, "print(x + 1, open('shared.txt').read())"); out != "42 before\n" {
		t.Fatalf("the session from the snapshot: %q", out)
	}
	// A write in one is not seen in the other, either way.
	ts.run(t, aliceKey, from.ID, "x = 'copy'\nopen('shared.txt', 'w').write('copy')")
	if out := ts.run(t, aliceKey, s.ID, "print(x, open('shared.txt').read())"); out != "41 before\n" {
		t.Fatalf("the original after the copy's write: %q", out)
	}
	ts.run(t, aliceKey, s.ID, "open('shared.txt', 'w').write('original')")
	if out := ts.run(t, aliceKey, from.ID, "print(x, open('shared.txt').read())"); out != "copy copy\n" {
		t.Fatalf("the copy after the original's write: %q", out)
	}

	var list struct {
		Snapshots []snapshotInfo `json:"snapshots"`
	}
	for _, q := range []string{"", "?session_id=" + s.ID, "?name=first", "?name=" + snap.ID} {
		list.Snapshots = nil
		if resp := ts.call(t, "GET", "/snapshots"+q, aliceKey, nil, &list); resp.StatusCode != http.StatusOK || len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap.ID {
			t.Fatalf("GET /snapshots%s: status %d, %+v", q, resp.StatusCode, list.Snapshots)
		}
	}
	for _, q := range []string{"?name=other", "?session_id=nosuch"} {
		if ts.call(t, "GET", "/snapshots"+q, aliceKey, nil, &list); len(list.Snapshots) != 0 {
			t.Fatalf("GET /snapshots%s: %+v", q, list.Snapshots)
		}
	}
	if resp := ts.call(t, "GET", "/snapshots", bobKey, nil, &list); resp.StatusCode != http.StatusOK || len(list.Snapshots) != 0 {
		t.Fatalf("bob lists %+v", list.Snapshots)
	}

	// Refusals: unknown or another key's session or snapshot.
	wantProblem(t, ts.call(t, "POST", "/sessions/nosuch/snapshots", aliceKey, map[string]any{}, nil), http.StatusNotFound, "session_not_found")
	wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+"/snapshots", bobKey, map[string]any{}, nil), http.StatusNotFound, "session_not_found")
	wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+"/snapshots", aliceKey, map[string]any{"name": "a\x01b"}, nil), http.StatusBadRequest, "invalid_request")
	wantProblem(t, ts.call(t, "POST", "/sessions", aliceKey, map[string]any{"from_snapshot": "nosuch"}, nil), http.StatusNotFound, "snapshot_not_found")
	wantProblem(t, ts.call(t, "POST", "/sessions", bobKey, map[string]any{"from_snapshot": snap.ID}, nil), http.StatusNotFound, "snapshot_not_found")
	wantProblem(t, ts.call(t, "DELETE", "/snapshots/"+snap.ID, bobKey, nil, nil), http.StatusNotFound, "snapshot_not_found")

	if resp := ts.call(t, "DELETE", "/snapshots/"+snap.ID, aliceKey, nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: status %d", resp.StatusCode)
	}
	wantProblem(t, ts.call(t, "DELETE", "/snapshots/"+snap.ID, aliceKey, nil, nil), http.StatusNotFound, "snapshot_not_found")
	wantProblem(t, ts.call(t, "POST", "/sessions", aliceKey, map[string]any{"from_snapshot": snap.ID}, nil), http.StatusNotFound, "snapshot_not_found")
	// The session started from it goes on.
	if out := ts.run(t, aliceKey, from.ID, "print(x)"); out != "copy\n" {
		t.Fatalf("the copy after its snapshot's deletion: %q", out)
	}
}

func TestForkIntoTwo(t *testing.T) {
	ts := startServer(t, twoKeys, noPools)
	s := ts.openSession(t, aliceKey, map[string]any{})
	ts.run(t, aliceKey, s.ID, "x = 41\nopen('f.txt', 'w').write('parent')")

	for _, count := range []int{0, -1, 101} {
		wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+"/fork", aliceKey, map[string]any{"count": count}, nil), http.StatusBadRequest, "invalid_request")
	}
	wantProblem(t, ts.call(t, "POST", "/sessions/nosuch/fork", aliceKey, map[string]any{}, nil), http.StatusNotFound, "session_not_found")
	wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+"/fork", bobKey, map[string]any{}, nil), http.StatusNotFound, "session_not_found")

	var out struct {
		Sessions []struct {
			Session *sessionInfo                    `json:"session"`
			Error   *struct{ Kind, Message string } `json:"error"`
		} `json:"sessions"`
	}
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/fork", aliceKey, map[string]any{"count": 2}, &out); resp.StatusCode != http.StatusCreated || len(out.Sessions) != 2 {
		t.Fatalf("fork into 2: status %d, %+v", resp.StatusCode, out.Sessions)
	}
	ids := map[string]bool{s.ID: true}
	for i, f := range out.Sessions {
		if f.Session == nil || f.Error != nil || ids[f.Session.ID] {
			t.Fatalf("copy %d: %+v %+v", i, f.Session, f.Error)
		}
		id := f.Session.ID
		ids[id] = true
		t.Cleanup(func() { ts.call(t, "DELETE", "/sessions/"+id, aliceKey, nil, nil) })
		if got := ts.run(t, aliceKey, id, "print(x, open('f.txt').read())"); got != "41 parent\n" {
			t.Fatalf("copy %d: %q", i, got)
		}
	}
	// Each copy diverges; none sees the others' or the parent's writes.
	a, b := out.Sessions[0].Session.ID, out.Sessions[1].Session.ID
	ts.run(t, aliceKey, a, "x = 'a'\nopen('f.txt', 'w').write('a')")
	ts.run(t, aliceKey, b, "x = 'b'\nopen('f.txt', 'w').write('b')")
	for id, want := range map[string]string{s.ID: "41 parent\n", a: "a a\n", b: "b b\n"} {
		if got := ts.run(t, aliceKey, id, "print(x, open('f.txt').read())"); got != want {
			t.Errorf("session %s: %q, want %q", id, got, want)
		}
	}
	var list struct {
		Sessions []sessionInfo `json:"sessions"`
	}
	ts.call(t, "GET", "/sessions", aliceKey, nil, &list)
	if len(list.Sessions) != 3 {
		t.Errorf("alice lists %d sessions after a fork into 2, want 3", len(list.Sessions))
	}
	if !strings.HasPrefix(out.Sessions[0].Session.State, "running") {
		t.Errorf("a copy's state: %q", out.Sessions[0].Session.State)
	}
}

// Under gVisor too: a pause keeps the session's state, and the next
// request (auto resume) or a resume brings it back.
func TestPauseAndResumeUnderGVisor(t *testing.T) {
	ts := startServer(t, twoKeys, func(c *config.Config) {
		noPools(c)
		c.EnableContainerMode, c.GVisorPoolSize, c.GVisorDataPoolSize, c.GVisorSessionPoolSize = true, 0, 0, 0
	})
	s := ts.openSession(t, aliceKey, map[string]any{"use_container": true})
	ts.run(t, aliceKey, s.ID, "x = 41\nopen('kept.txt', 'w').write('kept')")
	var paused sessionInfo
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, nil, &paused); resp.StatusCode != http.StatusOK || paused.State != "paused" {
		t.Fatalf("pause under gVisor: status %d, %+v", resp.StatusCode, paused)
	}
	wantProblem(t, ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, nil, nil), http.StatusConflict, "session_paused")
	ts.call(t, "POST", "/sessions/"+s.ID+"/resume", aliceKey, nil, nil)
	if out := ts.run(t, aliceKey, s.ID, "print(x + 1, open('kept.txt').read())"); out != "42 kept\n" {
		t.Fatalf("after the resume: %q", out)
	}
	ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, nil, nil)
	if out := ts.run(t, aliceKey, s.ID, "print(x)"); out != "41\n" {
		t.Fatalf("an execute on the paused session: %q", out)
	}
}
