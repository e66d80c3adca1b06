package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/service"
)

// The persistence tools (#26) through the official client over streamable
// HTTP: two client connections are two owners (the server has no keys),
// so each is "another key" to the other.
func twoClients(t *testing.T) (alice, bob *mcp.ClientSession) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.DataPoolSize, cfg.SessionPoolSize = 0, 0, 0
	cfg.MachinePoolSize = 0
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	streamable, _ := mcpserver.HTTPHandlers(svc, mcpserver.Options{Config: cfg}, false)
	srv := httptest.NewServer(streamable)
	t.Cleanup(srv.Close)
	open := func() *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: http.DefaultClient, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	return open(), open()
}

// toolOK calls a tool and returns its structured result, failing the test
// on an error.
func toolOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	r := call(t, cs, name, args)
	if r.IsError {
		t.Fatalf("%s %v: %s", name, args, text(r))
	}
	return structured(t, r)
}

// toolRefused calls a tool and checks that it fails saying want.
func toolRefused(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want string) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	switch {
	case err != nil: // schema validation answers at the protocol level
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s %v: %v, want mention of %q", name, args, err, want)
		}
	case !r.IsError || !strings.Contains(text(r), want):
		t.Errorf("%s %v: isError=%v %q, want a tool error mentioning %q", name, args, r.IsError, text(r), want)
	}
}

func runIn(t *testing.T, cs *mcp.ClientSession, id, code string) string {
	t.Helper()
	m := toolOK(t, cs, "execute_code", map[string]any{"session_id": id, "code": code})
	if m["success"] != true {
		t.Fatalf("execute %q in %s: %v", code, id, m)
	}
	out, _ := m["stdout"].(string)
	return out
}

func TestPauseAndResumeTools(t *testing.T) {
	alice, bob := twoClients(t)
	id, _ := toolOK(t, alice, "create_session", map[string]any{})["session_id"].(string)
	runIn(t, alice, id, "x = 41\nopen('kept.txt', 'w').write('kept')")

	if m := toolOK(t, alice, "pause_session", map[string]any{"session_id": id}); m["state"] != "paused" || m["paused_at"] == nil {
		t.Fatalf("pause_session: %v", m)
	}
	toolRefused(t, alice, "pause_session", map[string]any{"session_id": id}, "session paused")
	for _, name := range []string{"pause_session", "resume_session"} {
		toolRefused(t, alice, name, map[string]any{"session_id": "nosuch"}, "session not found")
		toolRefused(t, bob, name, map[string]any{"session_id": id}, "session not found")
	}
	if m := toolOK(t, alice, "resume_session", map[string]any{"session_id": id}); m["state"] != "running" {
		t.Fatalf("resume_session: %v", m)
	}
	if out := runIn(t, alice, id, "print(x + 1, open('kept.txt').read())"); out != "42 kept\n" {
		t.Fatalf("after resume_session: %q", out)
	}
	// auto_resume (the default): the next call resumes the session.
	toolOK(t, alice, "pause_session", map[string]any{"session_id": id, "keep_memory": true})
	if out := runIn(t, alice, id, "print(x)"); out != "41\n" {
		t.Fatalf("an execute_code on the paused session: %q", out)
	}

	// Without auto_resume only resume_session wakes it.
	manual := toolOK(t, alice, "create_session", map[string]any{"auto_resume": false, "on_timeout": "pause"})
	if manual["auto_resume"] != false || manual["on_timeout"] != "pause" {
		t.Fatalf("create_session with auto_resume false, on_timeout pause: %v", manual)
	}
	mid := manual["session_id"].(string)
	toolOK(t, alice, "pause_session", map[string]any{"session_id": mid})
	toolRefused(t, alice, "execute_code", map[string]any{"session_id": mid, "code": "1"}, "session paused")
	toolRefused(t, alice, "create_session", map[string]any{"on_timeout": "sleep"}, "on_timeout")

	// Without memory: the files stay, the variables go.
	toolOK(t, alice, "pause_session", map[string]any{"session_id": id, "keep_memory": false})
	toolOK(t, alice, "resume_session", map[string]any{"session_id": id})
	if out := runIn(t, alice, id, "print(open('kept.txt').read(), 'x' in globals())"); out != "kept False\n" {
		t.Fatalf("after a pause without memory: %q", out)
	}
}

func TestSnapshotForkAndListTools(t *testing.T) {
	alice, bob := twoClients(t)
	id, _ := toolOK(t, alice, "create_session", map[string]any{})["session_id"].(string)
	runIn(t, alice, id, "x = 41\nopen('f.txt', 'w').write('parent')")

	snap := toolOK(t, alice, "snapshot_session", map[string]any{"session_id": id, "name": "first"})
	sid, _ := snap["snapshot_id"].(string)
	if sid == "" || snap["name"] != "first" || snap["session_id"] != id {
		t.Fatalf("snapshot_session: %v", snap)
	}
	toolRefused(t, alice, "snapshot_session", map[string]any{"session_id": "nosuch"}, "session not found")
	toolRefused(t, bob, "snapshot_session", map[string]any{"session_id": id}, "session not found")
	toolRefused(t, alice, "snapshot_session", map[string]any{"session_id": id, "name": "a\nb"}, "not printable")

	from := toolOK(t, alice, "create_session", map[string]any{"from_snapshot": sid})
	fid := from["session_id"].(string)
	if out := runIn(t, alice, fid, "print(x + 1, open('f.txt').read())"); out != "42 parent\n" {
		t.Fatalf("a session from the snapshot: %q", out)
	}
	runIn(t, alice, fid, "x = 'copy'\nopen('f.txt', 'w').write('copy')")
	if out := runIn(t, alice, id, "print(x, open('f.txt').read())"); out != "41 parent\n" {
		t.Fatalf("the original after the copy's write: %q", out)
	}
	toolRefused(t, alice, "create_session", map[string]any{"from_snapshot": "nosuch"}, "snapshot not found")
	toolRefused(t, bob, "create_session", map[string]any{"from_snapshot": sid}, "snapshot not found")

	list := toolOK(t, alice, "list_snapshots", map[string]any{"session_id": id})["snapshots"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["snapshot_id"] != sid {
		t.Fatalf("list_snapshots: %v", list)
	}
	if list := toolOK(t, bob, "list_snapshots", map[string]any{})["snapshots"].([]any); len(list) != 0 {
		t.Fatalf("bob's list_snapshots: %v", list)
	}

	for _, count := range []int{0, 101} {
		toolRefused(t, alice, "fork_session", map[string]any{"session_id": id, "count": count}, "count")
	}
	toolRefused(t, alice, "fork_session", map[string]any{"session_id": "nosuch"}, "session not found")
	toolRefused(t, bob, "fork_session", map[string]any{"session_id": id}, "session not found")
	copies := toolOK(t, alice, "fork_session", map[string]any{"session_id": id, "count": 2})["sessions"].([]any)
	if len(copies) != 2 {
		t.Fatalf("fork_session count 2: %v", copies)
	}
	for i, c := range copies {
		s, _ := c.(map[string]any)["session"].(map[string]any)
		cid, _ := s["session_id"].(string)
		if cid == "" || cid == id {
			t.Fatalf("copy %d: %v", i, c)
		}
		runIn(t, alice, cid, "x = 'copy"+string(rune('a'+i))+"'")
		if out := runIn(t, alice, cid, "print(x, open('f.txt').read())"); out != "copy"+string(rune('a'+i))+" parent\n" {
			t.Fatalf("copy %d: %q", i, out)
		}
	}
	if out := runIn(t, alice, id, "print(x)"); out != "41\n" {
		t.Fatalf("the parent after its copies' writes: %q", out)
	}

	toolRefused(t, bob, "delete_snapshot", map[string]any{"snapshot_id": sid}, "snapshot not found")
	if m := toolOK(t, alice, "delete_snapshot", map[string]any{"snapshot_id": sid}); m["done"] != true {
		t.Fatalf("delete_snapshot: %v", m)
	}
	toolRefused(t, alice, "delete_snapshot", map[string]any{"snapshot_id": sid}, "snapshot not found")
}
