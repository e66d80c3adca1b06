package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Two tenants of one real `codecage serve`, REST, MCP and E2B.
const (
	shareAliceKey = "e2b_a11ce0123456789abcdef0123456789abcdef"
	shareBobKey   = "e2b_b0b000123456789abcdef0123456789abcdef"
)

// shareServer is a real serve with two API keys and small server-wide
// bounds, whose default shares (auto: half of each) are 3 sessions and
// 2 watches per key.
func shareServer(t *testing.T, env ...string) *server {
	t.Helper()
	dir := t.TempDir()
	return startServe(t, append([]string{"SANDBOX_API_KEYS=alice:" + shareAliceKey + ",bob:" + shareBobKey, "SANDBOX_RATE_LIMIT=0",
		"SANDBOX_E2B_LISTEN=127.0.0.1:0", "SANDBOX_POOL_SIZE=0", "SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0",
		"SANDBOX_MAX_SESSIONS=6", "SANDBOX_MAX_WATCHES=4", "SANDBOX_SESSION_MAX_WATCHES=4",
		"SANDBOX_STATE_DIR=" + filepath.Join(dir, "state"), "SANDBOX_AUDIT_DB=" + filepath.Join(dir, "audit.db")}, env...)...)
}

// e2bCall calls the E2B listener: the control plane with an API key, a
// sandbox's daemon with its envd token.
func e2bCall(t *testing.T, method, url string, header map[string]string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if json.Unmarshal(raw, &out) != nil {
		out["raw"] = string(raw)
	}
	return resp.StatusCode, resp.Header, out
}

func ownSessions(t *testing.T, s *server, key string) int {
	t.Helper()
	code, out := call(t, "GET", s.url+"/sessions", key, nil)
	list, _ := out["sessions"].([]any)
	if code != 200 {
		t.Fatalf("list sessions: %d %v", code, out)
	}
	return len(list)
}

// One key cannot take every session: alice's fork that would pass her
// share is refused whole (nothing made), a fork that fills it is made;
// then bob still opens a session over REST and a sandbox over E2B, while
// alice's next, on every surface, is refused with the setting named. A
// paused session still counts; closing one frees its place.
func TestKeyShareOfSessions(t *testing.T) {
	s := shareServer(t)
	code, created := call(t, "POST", s.url+"/sessions", shareAliceKey, map[string]any{})
	if code != 201 {
		t.Fatalf("alice's first session: %d %v", code, created)
	}
	first, _ := created["session_id"].(string)

	// Past her share (3): refused whole, before anything is copied.
	code, out := call(t, "POST", s.url+"/sessions/"+first+"/fork", shareAliceKey, map[string]any{"count": 5})
	if code != 409 || out["type"] == nil || !strings.Contains(fmt.Sprint(out), "SANDBOX_KEY_MAX_SESSIONS") || !strings.Contains(fmt.Sprint(out["type"]), "key_limit") {
		t.Fatalf("a fork of 5 past alice's share of 3: %d %v, want 409 key_limit naming SANDBOX_KEY_MAX_SESSIONS", code, out)
	}
	if n := ownSessions(t, s, shareAliceKey); n != 1 {
		t.Fatalf("the refused fork left alice %d sessions, want her 1", n)
	}
	// Up to her share: made.
	code, out = call(t, "POST", s.url+"/sessions/"+first+"/fork", shareAliceKey, map[string]any{"count": 2})
	copies, _ := out["sessions"].([]any)
	if code != 201 || len(copies) != 2 {
		t.Fatalf("a fork of 2 within alice's share: %d %v", code, out)
	}
	for _, c := range copies {
		if c.(map[string]any)["session"] == nil {
			t.Fatalf("a copy within the share failed: %v", c)
		}
	}
	if n := ownSessions(t, s, shareAliceKey); n != 3 {
		t.Fatalf("alice has %d sessions, want 3", n)
	}

	// Bob still has his share: a REST session and an E2B sandbox.
	if code, out := call(t, "POST", s.url+"/sessions", shareBobKey, map[string]any{}); code != 201 {
		t.Errorf("bob's session over REST with alice at her share: %d %v", code, out)
	}
	if code, _, out := e2bCall(t, "POST", s.e2bURL+"/v2/sandboxes", map[string]string{"X-API-KEY": shareBobKey}, `{"templateID": "base"}`); code != 201 {
		t.Errorf("bob's E2B sandbox with alice at her share: %d %v", code, out)
	}

	// Alice's next: refused on every surface, the setting named.
	refusedREST := func(when string) {
		t.Helper()
		code, out := call(t, "POST", s.url+"/sessions", shareAliceKey, map[string]any{})
		if code != 409 || !strings.Contains(fmt.Sprint(out["type"]), "key_limit") || !strings.Contains(fmt.Sprint(out["detail"]), "SANDBOX_KEY_MAX_SESSIONS") {
			t.Errorf("alice's REST session %s: %d %v, want 409 key_limit naming SANDBOX_KEY_MAX_SESSIONS", when, code, out)
		}
	}
	refusedREST("at her share")
	code, header, out := e2bCall(t, "POST", s.e2bURL+"/v2/sandboxes", map[string]string{"X-API-KEY": shareAliceKey}, `{"templateID": "base"}`)
	if code != 429 || !strings.Contains(fmt.Sprint(out["message"]), "SANDBOX_KEY_MAX_SESSIONS") || header.Get("Retry-After") != "" {
		t.Errorf("alice's E2B sandbox at her share: %d %v (Retry-After %q), want 429 naming SANDBOX_KEY_MAX_SESSIONS, no Retry-After", code, out, header.Get("Retry-After"))
	}
	cs := mcpClient(t, s.url+"/mcp", shareAliceKey)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_session", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	text, _ := json.Marshal(res.Content)
	if !res.IsError || !strings.Contains(string(text), "key limit: ") || !strings.Contains(string(text), "SANDBOX_KEY_MAX_SESSIONS") {
		t.Errorf("alice's MCP create_session at her share: error %v %s, want a key limit naming SANDBOX_KEY_MAX_SESSIONS", res.IsError, text)
	}
	// A fork of one at her share: refused too.
	if code, out := call(t, "POST", s.url+"/sessions/"+first+"/fork", shareAliceKey, map[string]any{"count": 1}); code != 409 || !strings.Contains(fmt.Sprint(out), "SANDBOX_KEY_MAX_SESSIONS") {
		t.Errorf("a fork at alice's share: %d %v", code, out)
	}

	// A paused session holds its place; a closed one frees it.
	if code, out := call(t, "POST", s.url+"/sessions/"+first+"/pause", shareAliceKey, map[string]any{}); code != 200 {
		t.Fatalf("pause: %d %v", code, out)
	}
	refusedREST("with one of hers paused")
	if code, out := call(t, "DELETE", s.url+"/sessions/"+first, shareAliceKey, nil); code != 204 && code != 200 {
		t.Fatalf("close: %d %v", code, out)
	}
	if code, out := call(t, "POST", s.url+"/sessions", shareAliceKey, map[string]any{}); code != 201 {
		t.Errorf("alice's session once she closed one: %d %v", code, out)
	}
}

// One key cannot take every watch: alice's third watch is past her share
// (2 of the server's 4), refused with the setting named; bob's first still
// starts; a stopped watch frees its place.
func TestKeyShareOfWatches(t *testing.T) {
	s := shareServer(t)
	sandbox := func(key string) (id, token string) {
		code, _, out := e2bCall(t, "POST", s.e2bURL+"/v2/sandboxes", map[string]string{"X-API-KEY": key}, `{"templateID": "base"}`)
		if code != 201 {
			t.Fatalf("create: %d %v", code, out)
		}
		return out["sandboxID"].(string), out["envdAccessToken"].(string)
	}
	watch := func(id, token string) (int, map[string]any) {
		code, _, out := e2bCall(t, "POST", s.e2bURL+"/filesystem.Filesystem/CreateWatcher",
			map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}, `{"path": "/home/user"}`)
		return code, out
	}
	a1, a1Token := sandbox(shareAliceKey)
	a2, a2Token := sandbox(shareAliceKey)
	var held []string
	for _, sb := range [][2]string{{a1, a1Token}, {a2, a2Token}} {
		code, out := watch(sb[0], sb[1])
		if code != 200 || out["watcherId"] == nil {
			t.Fatalf("alice's watch within her share: %d %v", code, out)
		}
		held = append(held, out["watcherId"].(string))
	}
	code, out := watch(a2, a2Token)
	if code == 200 || out["code"] != "resource_exhausted" || !strings.Contains(fmt.Sprint(out["message"]), "SANDBOX_KEY_MAX_WATCHES") {
		t.Fatalf("alice's third watch, past her share: %d %v, want resource_exhausted naming SANDBOX_KEY_MAX_WATCHES", code, out)
	}
	b, bToken := sandbox(shareBobKey)
	if code, out := watch(b, bToken); code != 200 {
		t.Errorf("bob's first watch with alice at her share: %d %v", code, out)
	}
	if code, _, out := e2bCall(t, "POST", s.e2bURL+"/filesystem.Filesystem/RemoveWatcher",
		map[string]string{"E2b-Sandbox-Id": a1, "E2b-Sandbox-Port": "49983", "X-Access-Token": a1Token}, `{"watcherId": "`+held[0]+`"}`); code != 200 {
		t.Fatalf("remove a watch: %d %v", code, out)
	}
	if code, out := watch(a2, a2Token); code != 200 {
		t.Errorf("alice's watch once she stopped one: %d %v", code, out)
	}
}

// Without API keys the one caller has the whole server, as before: a
// fork fills every session the server has.
func TestNoKeysNoShare(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "SANDBOX_RATE_LIMIT=0", "SANDBOX_POOL_SIZE=0", "SANDBOX_SESSION_POOL_SIZE=0", "SANDBOX_MACHINE_POOL_SIZE=0", "SANDBOX_MAX_SESSIONS=4",
		"SANDBOX_STATE_DIR="+filepath.Join(dir, "state"), "SANDBOX_AUDIT_DB="+filepath.Join(dir, "audit.db"))
	code, created := call(t, "POST", s.url+"/sessions", "", map[string]any{})
	if code != 201 {
		t.Fatalf("create: %d %v", code, created)
	}
	code, out := call(t, "POST", s.url+"/sessions/"+created["session_id"].(string)+"/fork", "", map[string]any{"count": 3})
	copies, _ := out["sessions"].([]any)
	if code != 201 || len(copies) != 3 || bytes.Contains(must(json.Marshal(copies)), []byte(`"error"`)) {
		t.Fatalf("a fork to the server's bound without keys: %d %v", code, out)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
