package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/pipfixture"
)

const (
	operatorKey = "0123456789abcdef0123"
	userKey     = "fedcba9876543210fedc"
)

// /environments is the operator's: an operator key builds, lists, shows,
// removes and collects; another key gets 403 everywhere; the build and
// the refusals are audited.
func TestEnvironmentsREST(t *testing.T) {
	wh := t.TempDir()
	for _, w := range []struct{ name, version string }{{"restpkg", "1.0"}, {"restother", "2.0"}} {
		if _, err := pipfixture.Wheel(wh, w.name, w.version, pipfixture.WheelOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ts := startServer(t, "alice:"+operatorKey+",bob:"+userKey, func(c *config.Config) {
		c.PoolSize = 0
		c.PipFindLinks = wh
		c.OperatorKeys = []string{"alice"}
	})
	build := map[string]any{"name": "rest-env", "requirements": []string{"restpkg==1.0"}, "preimport": []string{"restpkg"}}

	for _, c := range []struct{ method, path string }{
		{"GET", "/environments"}, {"POST", "/environments"}, {"GET", "/environments/rest-env"},
		{"DELETE", "/environments/rest-env"}, {"POST", "/environments/gc"},
	} {
		var body any
		if c.method == "POST" && c.path == "/environments" {
			body = build
		}
		p := wantProblem(t, ts.call(t, c.method, c.path, userKey, body, nil), http.StatusForbidden, "forbidden")
		if !strings.Contains(p.Detail, "SANDBOX_OPERATOR_KEYS") {
			t.Errorf("%s %s: %q does not say who may", c.method, c.path, p.Detail)
		}
	}

	var e envstore.Env
	resp := ts.call(t, "POST", "/environments", operatorKey, build, &e)
	if resp.StatusCode != http.StatusCreated || e.Name != "rest-env" || !slices.Contains(e.Modules, "restpkg") || !strings.HasPrefix(e.PythonVersion, "3.") {
		t.Fatalf("build: %d %+v", resp.StatusCode, e)
	}
	var got envstore.Env
	if resp := ts.call(t, "GET", "/environments/rest-env", operatorKey, nil, &got); resp.StatusCode != 200 || got.ID != e.ID {
		t.Errorf("get: %d %+v", resp.StatusCode, got)
	}
	var list struct{ Environments []envstore.Env }
	if resp := ts.call(t, "GET", "/environments", operatorKey, nil, &list); resp.StatusCode != 200 || len(list.Environments) != 1 {
		t.Errorf("list: %d %+v", resp.StatusCode, list)
	}
	wantProblem(t, ts.call(t, "POST", "/environments", operatorKey, build, nil), http.StatusConflict, "environment_exists")
	wantProblem(t, ts.call(t, "POST", "/environments", operatorKey, map[string]any{"name": "Bad Name", "requirements": []string{"restpkg"}}, nil), http.StatusBadRequest, "invalid_request")
	p := wantProblem(t, ts.call(t, "POST", "/environments", operatorKey, map[string]any{"name": "nope", "requirements": []string{"absentpkg"}}, nil), http.StatusUnprocessableEntity, "build_failed")
	if !strings.Contains(p.Detail, "absentpkg") {
		t.Errorf("a failed build's detail: %q", p.Detail)
	}

	// The stream: log lines as they come, then the record.
	req, _ := http.NewRequest("POST", ts.URL+"/environments", strings.NewReader(`{"name":"streamed","requirements":["restother"]}`))
	req.Header.Set("Authorization", "Bearer "+operatorKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	if sresp.StatusCode != 200 || !strings.HasPrefix(sresp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", sresp.StatusCode, sresp.Header.Get("Content-Type"))
	}
	ch := make(chan sseEvent)
	go readEvents(sresp.Body, ch)
	var logs []string
	var result envstore.Env
	last := ""
	for ev := range ch {
		last = ev.Event
		switch ev.Event {
		case "log":
			var l struct{ Line string }
			_ = json.Unmarshal([]byte(ev.Data), &l)
			logs = append(logs, l.Line)
		case "result":
			_ = json.Unmarshal([]byte(ev.Data), &result)
		default:
			t.Fatalf("event %s: %s", ev.Event, ev.Data)
		}
	}
	if last != "result" || result.Name != "streamed" || !strings.Contains(strings.Join(logs, "\n"), "Successfully installed restother") {
		t.Fatalf("stream ended with %q, record %+v, log:\n%s", last, result, strings.Join(logs, "\n"))
	}

	if resp := ts.call(t, "DELETE", "/environments/rest-env", operatorKey, nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	wantProblem(t, ts.call(t, "GET", "/environments/rest-env", operatorKey, nil, nil), http.StatusNotFound, "environment_not_found")
	var gc struct{ Layers int }
	if resp := ts.call(t, "POST", "/environments/gc", operatorKey, nil, &gc); resp.StatusCode != 200 || gc.Layers != 1 {
		t.Errorf("gc: %d %+v", resp.StatusCode, gc)
	}

	built, denied := 0, 0
	for _, ev := range ts.events(t) {
		if ev.Kind != "environment" {
			continue
		}
		switch {
		case ev.Outcome == "success" && ev.Key == "alice" && strings.Contains(ev.Code, "rest-env"):
			built++
		case ev.Outcome == "forbidden" && ev.Key == "bob":
			denied++
		}
	}
	if built == 0 || denied < 3 {
		t.Errorf("audit: %d successes of alice's on rest-env, %d of bob's refusals", built, denied)
	}
}
