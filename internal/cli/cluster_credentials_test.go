package cli

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/codecage/codecage/internal/pgtest"
	"github.com/codecage/codecage/internal/tlsfixture"
)

// TestReplicasAddEgressCredentials: two replicas, one PostgreSQL. A secret
// stored through one is bound, through the other, to a session the first
// holds; an E2B sandbox's network rules are replaced through the replica
// that does not hold it. Each time, the private API sees the header the
// request left with, added by the proxy of the replica running the code.
func TestReplicasAddEgressCredentials(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	api := tlsfixture.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	saw := func(path string) string {
		mu.Lock()
		defer mu.Unlock()
		return seen[path]
	}
	pg := pgtest.Start(t)
	rs, e2bAddr := startE2BReplicas(t, pg.DSN(), "SANDBOX_SNAPSHOT_SECRET="+snapshotSecret, "SANDBOX_ENABLE_NETWORK=true",
		"SANDBOX_NETWORK_ALLOW=localhost:"+api.Port, "SANDBOX_EGRESS_ROOTS="+api.CAFile)
	a, b := rs[0].url, rs[1].url

	if status, out := call(t, "POST", b+"/secrets", aliceKey, map[string]any{"name": "api", "value": "Bearer rest-canary"}); status != 201 {
		t.Fatalf("store through replica 1: %d %v", status, out)
	}
	status, out := call(t, "POST", a+"/sessions", aliceKey, map[string]any{"profile": "network"})
	if status != 201 {
		t.Fatalf("a session on replica 0: %d %v", status, out)
	}
	id := out["session_id"].(string)
	if status, out := call(t, "PUT", b+"/sessions/"+id+"/egress_credentials", aliceKey, map[string]any{"egress_credentials": []any{
		map[string]any{"secret": "api", "host": "localhost", "header": "Authorization"}}}); status != 200 {
		t.Fatalf("bind through replica 1: %d %v", status, out)
	}
	get := func(url, path string) {
		t.Helper()
		code := `import urllib.request; print(urllib.request.urlopen("https://localhost:` + api.Port + path + `", timeout=20).status)`
		if status, out := call(t, "POST", url+"/sessions/"+id+"/execute", aliceKey, map[string]any{"code": code}); status != 200 || out["stdout"] != "200\n" {
			t.Fatalf("a request from the session: %d %v", status, out)
		}
	}
	get(b, "/rest")
	if got := saw("/rest"); got != "Bearer rest-canary" {
		t.Errorf("a binding made through the other replica: the API got %q", got)
	}

	// E2B: created through replica 0, its rules replaced through replica 1.
	e2bCall := func(addr, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-KEY", aliceKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	rules := func(value string) string {
		return `{"allowOut": ["localhost"], "rules": {"localhost": [{"transform": {"headers": {"Authorization": "` + value + `"}}}]}}`
	}
	status, body := e2bCall(e2bAddr[0], "POST", "/v2/sandboxes", `{"templateID": "network", "timeout": 120, "network": `+rules("Bearer first")+`}`)
	if status != 201 {
		t.Fatalf("create through replica 0: %d %s", status, body)
	}
	sbx := body[strings.Index(body, `"sandboxID":"`)+len(`"sandboxID":"`):]
	sbx = sbx[:strings.Index(sbx, `"`)]
	if status, body := e2bCall(e2bAddr[1], "PUT", "/sandboxes/"+sbx+"/network", rules("Bearer second")); status != 204 {
		t.Fatalf("updateNetwork through replica 1: %d %s", status, body)
	}
	id = sbx
	get(b, "/e2b")
	if got := saw("/e2b"); got != "Bearer second" {
		t.Errorf("rules replaced through the other replica: the API got %q", got)
	}
}
