package e2b_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// newHostServer is the E2B surface with sandbox hosts under sbx.test.
func newHostServer(t *testing.T, tune ...func(*config.Config)) (*httptest.Server, *service.Service) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.SessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	cfg.AllowedCommands = policy.WithE2BCommands(cfg.AllowedCommands)
	for _, f := range tune {
		f(&cfg)
	}
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	keys, err := access.ParseKeys("alice:" + aliceKey + ",bob:" + bobKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e2b.New(svc, e2b.Options{Keys: keys, Domain: "sbx.test:443", Config: cfg}))
	t.Cleanup(srv.Close)
	return srv, svc
}

// hostGet fetches path from host (as getHost gives it), with the
// traffic token when not empty: the name is sent as the Host header, the
// connection goes to the test server (a lookup to 127.0.0.1).
func hostGet(t *testing.T, srv *httptest.Server, host, token, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	req.Host = host
	if token != "" {
		req.Header.Set("e2b-traffic-access-token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func createIn(t *testing.T, srv *httptest.Server, key, body string) (id, token, domain string) {
	t.Helper()
	status, created := call(t, "POST", srv.URL+"/v2/sandboxes", body, map[string]string{"X-API-KEY": key})
	if status != 201 {
		t.Fatalf("create: %d %v", status, created)
	}
	domain, _ = created["domain"].(string)
	return created["sandboxID"].(string), created["trafficAccessToken"].(string), domain
}

// getHost, as E2B's host tests and network tests (allowPublicTraffic)
// call it: a page served by python3 -m http.server in a sandbox's command
// is fetched through the E2B listener with the sandbox's traffic token;
// without it, or with another sandbox's, it is refused (403); a port
// nothing listens on is E2B's 502; a killed sandbox is E2B's 502 "not
// found"; a sandbox created with allowPublicTraffic needs no token.
func TestGetHostServesASandboxPage(t *testing.T) {
	srv, svc := newHostServer(t)
	id, token, domain := createIn(t, srv, aliceKey, `{"templateID": "base", "timeout": 120}`)
	if domain != "sbx.test:443" {
		t.Fatalf("create announced domain %q, want the server's", domain)
	}
	otherID, otherToken, _ := createIn(t, srv, bobKey, `{"templateID": "base", "timeout": 120}`)
	_ = otherID
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: api.Owner("alice", ""), Timeout: 2 * time.Minute,
			Command: "echo served-by-" + id + " > page.txt && exec python3 -m http.server 8000"})
	}()
	t.Cleanup(func() { cancel(); <-done })

	host := "8000-" + id + "." + domain
	status, body := 0, ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, body = hostGet(t, srv, host, token, "/page.txt"); status == 200 {
			break
		}
	}
	if status != 200 || strings.TrimSpace(body) != "served-by-"+id {
		t.Fatalf("GET %s/page.txt with the token: %d %q", host, status, body)
	}
	if status, body := hostGet(t, srv, host, "", "/page.txt"); status != 403 || strings.Contains(body, "served-by") {
		t.Errorf("without the token: %d %q, want 403", status, body)
	}
	if status, body := hostGet(t, srv, host, otherToken, "/page.txt"); status != 403 || strings.Contains(body, "served-by") {
		t.Errorf("with another sandbox's token: %d %q, want 403", status, body)
	}
	status, body = hostGet(t, srv, "8001-"+id+"."+domain, token, "/")
	var closed map[string]any
	_ = json.Unmarshal([]byte(body), &closed)
	if status != 502 || closed["message"] != "The sandbox is running but port is not open" || closed["sandboxId"] != id || closed["code"] != float64(502) {
		t.Errorf("a closed port: %d %s, want E2B's 502", status, body)
	}
	// The daemon's port by host is the daemon: it takes the envd token
	// (GET /sandboxes/{id} gives it), not the traffic token.
	_, detail := call(t, "GET", srv.URL+"/sandboxes/"+id, "", map[string]string{"X-API-KEY": aliceKey})
	hreq, _ := http.NewRequest("GET", srv.URL+"/health", nil)
	hreq.Host = "49983-" + id + "." + domain
	hreq.Header.Set("X-Access-Token", detail["envdAccessToken"].(string))
	if resp, err := http.DefaultClient.Do(hreq); err != nil || resp.StatusCode != 204 {
		t.Errorf("envd's health by host: %v %v, want 204", resp, err)
	} else {
		resp.Body.Close()
	}

	// A public sandbox: no token needed.
	pub, _, _ := createIn(t, srv, aliceKey, `{"templateID": "base", "timeout": 120, "network": {"allowPublicTraffic": true}}`)
	pctx, pcancel := context.WithCancel(context.Background())
	pdone := make(chan struct{})
	go func() {
		defer close(pdone)
		_, _ = svc.RunCommand(pctx, service.CommandRequest{SessionID: pub, Owner: api.Owner("alice", ""), Timeout: 2 * time.Minute,
			Command: "echo public > page.txt && exec python3 -m http.server 8080"})
	}()
	t.Cleanup(func() { pcancel(); <-pdone })
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, body = hostGet(t, srv, "8080-"+pub+"."+domain, "", "/page.txt"); status == 200 {
			break
		}
	}
	if status != 200 || strings.TrimSpace(body) != "public" {
		t.Errorf("a public sandbox without a token: %d %q", status, body)
	}

	// Killed: E2B's 502 "The sandbox was not found".
	if status, _ := call(t, "DELETE", srv.URL+"/sandboxes/"+id, "", map[string]string{"X-API-KEY": aliceKey}); status != 204 {
		t.Fatalf("kill: %d", status)
	}
	status, body = hostGet(t, srv, host, token, "/page.txt")
	var gone map[string]any
	_ = json.Unmarshal([]byte(body), &gone)
	if status != 502 || gone["message"] != "The sandbox was not found" || gone["sandboxId"] != id {
		t.Errorf("a killed sandbox: %d %s, want E2B's 502", status, body)
	}
}

// getMetrics: one sample of the sandbox's cgroups and workspace, in
// E2B's shape, within the asked range; none for a range before it.
func TestGetMetrics(t *testing.T) {
	srv, _ := newHostServer(t)
	id, _, _ := createIn(t, srv, aliceKey, `{"templateID": "base", "timeout": 120}`)
	req, _ := http.NewRequest("GET", srv.URL+"/sandboxes/"+id+"/metrics", nil)
	req.Header.Set("X-API-KEY", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(got) != 1 {
		t.Fatalf("metrics: %d %v", resp.StatusCode, got)
	}
	m := got[0]
	cfg := config.DefaultConfig()
	if m["cpuCount"] != float64(1) || m["memTotal"] != float64(cfg.MemoryLimit) || m["diskTotal"] != float64(cfg.WorkspaceMax) {
		t.Errorf("totals: %v", m)
	}
	if used, _ := m["memUsed"].(float64); used <= 0 || used > float64(cfg.MemoryLimit) {
		t.Errorf("memUsed %v: not the interpreter's memory", m["memUsed"])
	}
	if pct, ok := m["cpuUsedPct"].(float64); !ok || pct < 0 || pct > 100 {
		t.Errorf("cpuUsedPct %v", m["cpuUsedPct"])
	}
	if ts, _ := time.Parse(time.RFC3339Nano, m["timestamp"].(string)); time.Since(ts) > time.Minute || int64(m["timestampUnix"].(float64)) != ts.Unix() {
		t.Errorf("timestamp %v %v", m["timestamp"], m["timestampUnix"])
	}
	old := time.Now().Add(-time.Hour).Unix()
	req, _ = http.NewRequest("GET", srv.URL+"/sandboxes/"+id+"/metrics?start="+itoa(old)+"&end="+itoa(old+1800), nil)
	req.Header.Set("X-API-KEY", aliceKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(raw)) != "[]" {
		t.Errorf("a range before the sandbox: %d %s, want []", resp.StatusCode, raw)
	}
	if status, body := call(t, "GET", srv.URL+"/sandboxes/"+id+"/metrics", "", map[string]string{"X-API-KEY": bobKey}); status != 404 {
		t.Errorf("another key's sandbox: %d %v", status, body)
	}
}

func itoa(n int64) string { return jsonInt(n) }

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// With SANDBOX_E2B_PUBLIC_TRAFFIC, E2B's default: a sandbox's ports answer
// without the traffic token unless its create says allowPublicTraffic
// false.
func TestPublicTrafficIsTheOperatorsDefault(t *testing.T) {
	srv, svc := newHostServer(t, func(c *config.Config) { c.E2BPublicTraffic = true })
	serve := func(id string, port int) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: api.Owner("alice", ""), Timeout: 2 * time.Minute,
				Command: fmt.Sprintf("echo page-%s > page.txt && exec python3 -m http.server %d", id, port)})
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
	open, token, domain := createIn(t, srv, aliceKey, `{"templateID": "base", "timeout": 120}`)
	closed, closedToken, _ := createIn(t, srv, aliceKey, `{"templateID": "base", "timeout": 120, "network": {"allowPublicTraffic": false}}`)
	serve(open, 8000)
	serve(closed, 8000)
	get := func(id, token string) (int, string) {
		status, body := 0, ""
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			// 502: not listening yet; anything else is the answer.
			if status, body = hostGet(t, srv, "8000-"+id+"."+domain, token, "/page.txt"); status != 502 {
				break
			}
		}
		return status, strings.TrimSpace(body)
	}
	if status, body := get(open, ""); status != 200 || body != "page-"+open {
		t.Errorf("the default sandbox without a token: %d %q, want its page", status, body)
	}
	if status, body := get(open, token); status != 200 || body != "page-"+open {
		t.Errorf("the default sandbox with its token: %d %q", status, body)
	}
	if status, body := get(closed, closedToken); status != 200 || body != "page-"+closed {
		t.Fatalf("allowPublicTraffic false, with its token: %d %q", status, body)
	}
	if status, body := get(closed, ""); status != 403 || strings.Contains(body, "page-") {
		t.Errorf("allowPublicTraffic false, without a token: %d %q, want 403", status, body)
	}
}
