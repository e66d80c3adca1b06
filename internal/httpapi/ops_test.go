package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/pipfixture"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

const (
	aliceKey = "alice-key-0123456789abcdef"
	bobKey   = "bob-key-0123456789abcdef00"
	twoKeys  = "alice:" + aliceKey + ",bob:" + bobKey
)

func TestAPIKeys(t *testing.T) {
	ts := startServer(t, twoKeys, nil)
	resp := ts.call(t, "POST", "/execute", "", map[string]any{"code": "1"}, nil)
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Fatalf("WWW-Authenticate %q", got)
	}
	wantProblem(t, resp, 401, "unauthorized")
	wantProblem(t, ts.call(t, "POST", "/execute", "wrong-key-0123456789abcdef", map[string]any{"code": "1"}, nil), 401, "unauthorized")
	wantProblem(t, ts.call(t, "GET", "/metrics", "", nil, nil), 401, "unauthorized")
	wantProblem(t, ts.call(t, "POST", "/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, nil), 401, "unauthorized")
	for _, open := range []string{"/health", "/ready", "/openapi.json", "/docs"} {
		if resp := ts.call(t, "GET", open, "", nil, nil); resp.StatusCode == 401 {
			t.Errorf("%s needs a key", open)
		}
	}
	var r result
	if resp := ts.call(t, "POST", "/execute", aliceKey, map[string]any{"code": "2+2"}, &r); resp.StatusCode != 200 || string(r.Result) != "4" {
		t.Fatalf("alice: %d %+v", resp.StatusCode, r)
	}
	// Sessions belong to the key that made them.
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", aliceKey, map[string]any{}, &se)
	wantProblem(t, ts.call(t, "GET", "/sessions/"+se.ID, bobKey, nil, nil), 404, "session_not_found")
	wantProblem(t, ts.call(t, "POST", "/execute", bobKey, map[string]any{"code": "1", "session_id": se.ID}, nil), 404, "session_not_found")
	wantProblem(t, ts.call(t, "GET", "/sessions/"+se.ID+"/files", bobKey, nil, nil), 404, "session_not_found")
	if resp := ts.call(t, "GET", "/sessions/"+se.ID, aliceKey, nil, nil); resp.StatusCode != 200 {
		t.Fatalf("alice's own session: %d", resp.StatusCode)
	}

	// MCP over HTTP takes the same keys, and a key's sessions are the
	// same over MCP and REST.
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{aliceKey}}}, nil)
	if err != nil {
		t.Fatalf("MCP connect with a key: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_sessions", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("list_sessions: %v %+v", err, res)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, se.ID) {
		t.Fatalf("alice's REST session is not listed over MCP: %s", text)
	}
	_, err = client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp"}, nil)
	if err == nil {
		t.Fatal("MCP connect without a key succeeded")
	}
	// The legacy SSE transport too: its tool calls act for the key that
	// opened the connection.
	sse, err := client.Connect(context.Background(), &mcp.SSEClientTransport{Endpoint: ts.URL + "/mcp/sse",
		HTTPClient: &http.Client{Transport: bearerTransport{aliceKey}}}, nil)
	if err != nil {
		t.Fatalf("SSE connect with a key: %v", err)
	}
	defer sse.Close()
	res, err = sse.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_sessions", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, se.ID) {
		t.Fatalf("alice's session over SSE: %v %+v", err, res)
	}
	if _, err := client.Connect(context.Background(), &mcp.SSEClientTransport{Endpoint: ts.URL + "/mcp/sse"}, nil); err == nil {
		t.Fatal("SSE connect without a key succeeded")
	}

	// Refusals are audited.
	denied := 0
	for _, ev := range ts.events(t) {
		if ev.Kind == "denied" && ev.Outcome == "unauthorized" {
			denied++
		}
	}
	if denied < 4 {
		t.Fatalf("%d denied events in the audit log, want at least 4", denied)
	}
}

type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

func TestRateLimit(t *testing.T) {
	ts := startServer(t, twoKeys, func(c *config.Config) { c.RateLimit = 0.2; c.RateBurst = 3 })
	var limited *http.Response
	for i := range 6 {
		resp := ts.call(t, "GET", "/sessions/snosuch/files", aliceKey, nil, nil)
		if resp.StatusCode == 429 {
			limited = resp
			if i < 3 {
				t.Fatalf("limited after %d requests, burst is 3", i)
			}
			break
		}
	}
	if limited == nil {
		t.Fatal("no 429 in 6 requests at 0.2/s with a burst of 3")
	}
	ra, err := strconv.Atoi(limited.Header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", limited.Header.Get("Retry-After"))
	}
	p := wantProblem(t, limited, 429, "rate_limited")
	if p.RetryAfter != ra {
		t.Fatalf("retry_after %d, header %d", p.RetryAfter, ra)
	}
	// Limits are per key: bob is not limited by alice's burst.
	if resp := ts.call(t, "GET", "/sessions/snosuch/files", bobKey, nil, nil); resp.StatusCode == 429 {
		t.Fatal("bob limited by alice's requests")
	}
	// Executions count too, over MCP as over REST.
	var r result
	for range 3 {
		ts.call(t, "POST", "/execute", bobKey, map[string]any{"code": "1"}, &r)
	}
	wantProblem(t, ts.call(t, "POST", "/execute", bobKey, map[string]any{"code": "1"}, nil), 429, "rate_limited")
}

func TestConcurrencyLimitPerKey(t *testing.T) {
	ts := startServer(t, twoKeys, func(c *config.Config) { c.KeyConcurrency = 2; c.RateLimit = 0 })
	// Two runs hold alice's slots until the test releases them.
	var se struct {
		ID string `json:"session_id"`
	}
	var wg sync.WaitGroup
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", ts.URL+"/execute", strings.NewReader(`{"code":"import time\nprint('in', flush=True)\ntime.sleep(30)","timeout":60}`))
			req.Header.Set("Authorization", "Bearer "+aliceKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "text/event-stream")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp, err := http.DefaultClient.Do(req.WithContext(ctx))
			if err != nil {
				t.Error(err)
				started <- struct{}{}
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 4096)
			var got string
			for !strings.Contains(got, "event: stdout") {
				n, err := resp.Body.Read(buf)
				got += string(buf[:n])
				if err != nil {
					break
				}
			}
			started <- struct{}{}
			<-release
		}()
	}
	<-started
	<-started
	wantProblem(t, ts.call(t, "POST", "/sessions", aliceKey, map[string]any{}, &se), 429, "rate_limited")
	if resp := ts.call(t, "POST", "/execute", bobKey, map[string]any{"code": "1"}, nil); resp.StatusCode != 200 {
		t.Fatalf("bob refused while alice is at her limit: %d", resp.StatusCode)
	}
	close(release)
	wg.Wait()
}

func TestMetricsChangeAfterExecutions(t *testing.T) {
	ts := startServer(t, "", nil)
	scrape := func() string {
		resp := ts.call(t, "GET", "/metrics", "", nil, nil)
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	value := func(text, series string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	before := scrape()
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "print(1)"}, nil)
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "1/0"}, nil)
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "import socket"}, nil)
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "while True: pass", "timeout": 0.3}, nil)
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "1", "profile": "nosuch"}, nil)
	after := scrape()
	checks := map[string]float64{
		`sandbox_executions_total{backend="native",outcome="success",profile="basic"}`:         1,
		`sandbox_executions_total{backend="native",outcome="error",profile="basic"}`:           2,
		`sandbox_executions_total{backend="none",outcome="invalid_request",profile="default"}`: 1,
		`sandbox_errors_total{type="invalid_request"}`:                                         1,
		`sandbox_security_events_total{kind="import_denied"}`:                                  1,
		`sandbox_execution_duration_seconds_count{backend="native",profile="basic"}`:           4,
		`sandbox_http_requests_total{code="200",route="POST /execute"}`:                        4,
	}
	for series, delta := range checks {
		if got := value(after, series) - value(before, series); got != delta {
			t.Errorf("%s went up by %g, want %g", series, got, delta)
		}
	}
	limits := value(after, `sandbox_limits_hit_total{kind="timeout"}`) + value(after, `sandbox_limits_hit_total{kind="cpu"}`)
	if limits != 1 {
		t.Errorf("limits hit %g, want 1", limits)
	}
	if v := value(after, "sandbox_budget_slots"); v != float64(config.DefaultConfig().MaxSandboxes) {
		t.Errorf("sandbox_budget_slots %g, want SANDBOX_MAX_SANDBOXES", v)
	}
	if v := value(after, "sandbox_budget_in_use"); v < 1 || v > value(after, "sandbox_budget_slots") {
		t.Errorf("sandbox_budget_in_use %g: the pool's ready sandboxes hold slots, within the budget", v)
	}
	for _, g := range []string{`sandbox_pool_ready{class="basic"}`, "sandbox_sessions", "sandbox_queue_depth", "sandbox_requests_running", "sandbox_budget_waiting", "sandbox_budget_busy_total"} {
		if !strings.Contains(after, g+" ") {
			t.Errorf("gauge %s missing", g)
		}
	}
}

func TestAuditRowsForEachKind(t *testing.T) {
	ts := startServer(t, twoKeys, nil)
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/execute", aliceKey, map[string]any{"code": "print('audited')"}, nil)
	ts.call(t, "POST", "/validate", aliceKey, map[string]any{"code": "import os"}, nil)
	ts.call(t, "POST", "/sessions", aliceKey, map[string]any{}, &se)
	ts.call(t, "PUT", "/sessions/"+se.ID+"/files/content", aliceKey, map[string]any{"path": "a", "content": "x"}, nil)
	ts.call(t, "DELETE", "/sessions/"+se.ID, aliceKey, nil, nil)
	ts.call(t, "GET", "/info", "", nil, nil)
	kinds := map[string]int{}
	for _, ev := range ts.events(t) {
		kinds[ev.Kind]++
		if ev.Kind == service.EventExecute {
			if ev.Key != "alice" || ev.Surface != "rest" || ev.Code != "print('audited')" || ev.CodeHash != service.HashCode(ev.Code) ||
				ev.ExecutionID == "" || ev.Outcome != "success" || ev.Profile != "basic" {
				t.Errorf("execute row %+v", ev)
			}
		}
	}
	for _, k := range []string{"execute", "validate", "session", "file", "denied"} {
		if kinds[k] == 0 {
			t.Errorf("no %s row (rows: %v)", k, kinds)
		}
	}
	// The request log names the execution.
	if !strings.Contains(ts.log.String(), `"execution_id"`) || !strings.Contains(ts.log.String(), `"key":"alice"`) {
		t.Errorf("request log lacks the execution id or key:\n%s", ts.log.String())
	}
}

func TestPipInstallREST(t *testing.T) {
	wh := t.TempDir()
	if _, err := pipfixture.Wheel(wh, "restlib", "0.9", pipfixture.WheelOptions{}); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, twoKeys, func(c *config.Config) { c.PipFindLinks = wh })
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", aliceKey, map[string]any{}, &se)
	var res struct {
		Success          bool    `json:"success"`
		Message          string  `json:"message"`
		InstalledVersion *string `json:"installed_version"`
		InstallationTime float64 `json:"installation_time"`
		Error            *string `json:"error"`
	}
	if resp := ts.call(t, "POST", "/pip_install", aliceKey, map[string]any{"package": "restlib", "session_id": se.ID}, &res); resp.StatusCode != 200 || !res.Success || res.InstalledVersion == nil || *res.InstalledVersion != "0.9" {
		t.Fatalf("%d %+v", resp.StatusCode, res)
	}
	var r result
	ts.call(t, "POST", "/sessions/"+se.ID+"/execute", aliceKey, map[string]any{"code": "import restlib; restlib.VALUE"}, &r)
	if string(r.Result) != `"restlib 0.9"` {
		t.Fatalf("import: %+v", r)
	}
	res.Error = nil
	ts.call(t, "POST", "/pip_install", aliceKey, map[string]any{"package": "absentlib", "session_id": se.ID}, &res)
	if res.Success || res.Error == nil || *res.Error != "not_found" {
		t.Fatalf("absent: %+v", res)
	}
	wantProblem(t, ts.call(t, "POST", "/pip_install", aliceKey, map[string]any{"package": "--pre", "session_id": se.ID}, nil), 400, "invalid_request")
	wantProblem(t, ts.call(t, "POST", "/pip_install", bobKey, map[string]any{"package": "restlib", "session_id": se.ID}, nil), 404, "session_not_found")
	installs := 0
	for _, ev := range ts.events(t) {
		if ev.Kind == "install" {
			installs++
		}
	}
	if installs < 3 {
		t.Fatalf("%d install rows in the audit log", installs)
	}
}

// What a session's code leaves running between requests is reported in
// the next result (resources.idle_cpu_seconds) and added up in /metrics.
func TestSessionIdleCPUInResultAndMetrics(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) {
		c.AllowedImports = []string{policy.AllImports}
		c.IdleCPU = 0.05
	})
	var se struct {
		ID string `json:"session_id"`
	}
	if resp := ts.call(t, "POST", "/sessions", "", map[string]any{}, &se); resp.StatusCode != 200 && resp.StatusCode != 201 {
		t.Fatalf("create session: %d", resp.StatusCode)
	}
	type result struct {
		Success   bool `json:"success"`
		Resources struct {
			Idle *float64 `json:"idle_cpu_seconds"`
		} `json:"resources"`
	}
	var r result
	ts.call(t, "POST", "/sessions/"+se.ID+"/execute", "", map[string]any{"code": "import threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()"}, &r)
	if !r.Success || r.Resources.Idle == nil || *r.Resources.Idle != 0 {
		t.Fatalf("first request: %+v (want idle_cpu_seconds 0)", r)
	}
	between := time.Now()
	time.Sleep(time.Second) // idle time passing is what is tested
	r = result{}
	ts.call(t, "POST", "/sessions/"+se.ID+"/execute", "", map[string]any{"code": "1"}, &r)
	// The allowance (0.05 cores) over the time between the requests, which
	// a loaded host may lengthen, with room for the accounting.
	if span := time.Since(between).Seconds(); !r.Success || r.Resources.Idle == nil || *r.Resources.Idle <= 0 || *r.Resources.Idle > 0.05*1.5*(span+1) {
		t.Fatalf("second request: idle_cpu_seconds %v, want the background thread's share of the idle allowance over the %.2fs between the requests", r.Resources.Idle, span)
	}
	resp := ts.call(t, "GET", "/metrics", "", nil, nil)
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^sandbox_session_idle_cpu_seconds_total (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("sandbox_session_idle_cpu_seconds_total missing from /metrics")
	}
	if v, _ := strconv.ParseFloat(string(m[1]), 64); v < *r.Resources.Idle*0.999 {
		t.Errorf("sandbox_session_idle_cpu_seconds_total %g, below the %g reported", v, *r.Resources.Idle)
	}
}
