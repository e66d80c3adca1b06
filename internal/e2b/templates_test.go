package e2b_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/upstream"
)

// newOperatorServer is the E2B surface over a real service without API
// keys: every caller is its operator, who may build templates.
func newOperatorServer(t *testing.T) *httptest.Server { return newOperatorServerWith(t, nil) }

// newOperatorServerWith is newOperatorServer over a service with opts.
func newOperatorServerWith(t *testing.T, opts *service.Options) *httptest.Server {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.SessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	cfg.AllowedCommands = policy.WithE2BCommands(cfg.AllowedCommands)
	svc, err := service.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(e2b.New(svc, e2b.Options{Config: cfg}))
	t.Cleanup(srv.Close)
	return srv
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile("testdata/templates/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// requestBuild is Template.build's first call; it returns the build's ids.
func requestBuild(t *testing.T, srv *httptest.Server, name string) (string, string) {
	t.Helper()
	status, body := call(t, "POST", srv.URL+"/v3/templates", `{"name": "`+name+`", "tags": ["v1"], "cpuCount": 2, "memoryMB": 1024}`, nil)
	tid, _ := body["templateID"].(string)
	bid, _ := body["buildID"].(string)
	if status != 202 || tid == "" || len(bid) != 36 || fmt.Sprint(body["names"]) != "["+tid+"]" {
		t.Fatalf("POST /v3/templates %s: %d %v", name, status, body)
	}
	return tid, bid
}

// waitBuild polls the build's status as the SDK does (logsOffset grows by
// the entries received) until it ends; it returns the last answer and
// every log entry.
func waitBuild(t *testing.T, srv *httptest.Server, tid, bid string) (map[string]any, []map[string]any) {
	t.Helper()
	var logs []map[string]any
	deadline := time.Now().Add(2 * time.Minute)
	for {
		status, body := call(t, "GET", fmt.Sprintf("%s/templates/%s/builds/%s/status?logsOffset=%d", srv.URL, tid, bid, len(logs)), "", nil)
		if status != 200 {
			t.Fatalf("status: %d %v", status, body)
		}
		entries, _ := body["logEntries"].([]any)
		for _, e := range entries {
			logs = append(logs, e.(map[string]any))
		}
		if s := body["status"]; (s == "ready" || s == "error") && len(entries) == 0 {
			return body, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build did not end: %v", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Template.build's calls end to end on the wire: request, trigger, status
// polling. The build goes to service.BuildEnvironment; whatever it
// answers (today: environments are not available yet; later: the test's
// package is in no index) reaches the SDK as status "error" with a reason
// naming the step and the stage, and the log is paged by offset.
func TestTemplateBuildReachesStatusPolling(t *testing.T) {
	srv := newOperatorServer(t)
	tid, bid := requestBuild(t, srv, "probe:v1")
	if tid != "probe" {
		t.Fatalf("templateID %q, want the name without its tag", tid)
	}
	if status, body := call(t, "GET", srv.URL+"/templates/probe/builds/"+bid+"/status", "", nil); status != 200 || body["status"] != "waiting" {
		t.Fatalf("before the trigger: %d %v", status, body)
	}
	if status, body := call(t, "POST", srv.URL+"/v2/templates/probe/builds/"+bid, fixture(t, "debian-pip-env"), nil); status != 202 {
		t.Fatalf("trigger: %d %v", status, body)
	}
	if status, _ := call(t, "POST", srv.URL+"/v2/templates/probe/builds/"+bid, fixture(t, "debian-pip-env"), nil); status != 409 {
		t.Errorf("a second trigger: %d, want 409", status)
	}
	end, logs := waitBuild(t, srv, tid, bid)
	reason, _ := end["reason"].(map[string]any)
	msg, _ := reason["message"].(string)
	if end["status"] != "error" || reason["step"] != "1" || !strings.HasPrefix(msg, "building template probe failed at pip packages: ") {
		t.Fatalf("end %v", end)
	}
	t.Logf("reason: %s", msg)
	if len(logs) < 2 || !strings.Contains(logs[0]["message"].(string), "stage 1 of 1: pip packages into environment probe") ||
		logs[len(logs)-1]["level"] != "error" || logs[len(logs)-1]["message"] != msg {
		t.Fatalf("logs %v", logs)
	}
	// Offsets page the same log.
	_, page := call(t, "GET", srv.URL+"/templates/probe/builds/"+bid+"/status?logsOffset=1&limit=1", "", nil)
	if got, _ := page["logEntries"].([]any); len(got) != 1 || got[0].(map[string]any)["message"] != logs[1]["message"] {
		t.Fatalf("offset 1 limit 1: %v", page)
	}
	for q, want := range map[string]int{"logsOffset=-1": 400, "limit=101": 400, "logsOffset=x": 400} {
		if status, _ := call(t, "GET", srv.URL+"/templates/probe/builds/"+bid+"/status?"+q, "", nil); status != want {
			t.Errorf("%s: %d, want %d", q, status, want)
		}
	}
	if status, _ := call(t, "GET", srv.URL+"/templates/probe/builds/00000000-0000-4000-8000-000000000000/status", "", nil); status != 404 {
		t.Errorf("an unknown build: %d", status)
	}
	// Nothing was built: the alias is no template, and the list is empty.
	if status, _ := call(t, "GET", srv.URL+"/templates/aliases/probe", "", nil); status != 404 {
		t.Errorf("alias of a failed build: %d", status)
	}
}

// An unsupported step fails the build at its trigger with E2B's reason,
// which the SDK turns into a BuildError pointing at that builder call.
func TestTemplateUnsupportedStepFailsTheBuild(t *testing.T) {
	srv := newOperatorServer(t)
	tid, bid := requestBuild(t, srv, "npm-tpl")
	if status, _ := call(t, "POST", srv.URL+"/v2/templates/"+tid+"/builds/"+bid, fixture(t, "npm"), nil); status != 202 {
		t.Fatalf("trigger: %d", status)
	}
	status, body := call(t, "GET", srv.URL+"/templates/"+tid+"/builds/"+bid+"/status", "", nil)
	reason, _ := body["reason"].(map[string]any)
	if status != 200 || body["status"] != "error" || reason["step"] != "1" || !strings.Contains(reason["message"].(string), "npmInstall") {
		t.Fatalf("status %d %v", status, body)
	}
}

// Template names are environment names; E2B's own templates are taken;
// a template's builds are bounded.
func TestTemplateRequestRefusals(t *testing.T) {
	srv := newOperatorServer(t)
	for _, name := range []string{"Upper", "base", "code-interpreter-v1", "a/b", "x.b01234567.1", strings.Repeat("n", 65)} {
		if status, body := call(t, "POST", srv.URL+"/v3/templates", `{"name": "`+name+`"}`, nil); status != 400 {
			t.Errorf("%s: %d %v", name[:min(len(name), 20)], status, body)
		}
	}
	if status, body := call(t, "POST", srv.URL+"/v3/templates", `{}`, nil); status != 202 || !strings.HasPrefix(body["templateID"].(string), "tpl-") {
		t.Errorf("no name: %d %v", status, body)
	}
	for i := 0; ; i++ {
		status, body := call(t, "POST", srv.URL+"/v3/templates", fmt.Sprintf(`{"name": "t%d"}`, i), nil)
		if status == 429 {
			if i < 20 {
				t.Errorf("refused after %d builds: %v", i, body)
			}
			break
		}
		if status != 202 || i > 100 {
			t.Fatalf("build %d: %d %v", i, status, body)
		}
	}
}

// Building is an operator's action: a key that is not an operator's gets
// 403, which the SDK throws as a BuildError.
func TestTemplateBuildNeedsAnOperator(t *testing.T) {
	srv, _ := newServerWith(t, func(c *config.Config) { c.APIKeys = "alice:" + aliceKey + ",bob:" + bobKey })
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v3/templates", `{"name": "x"}`},
		{"POST", "/v2/templates", `{"alias": "x"}`},
		{"GET", "/templates/x/files/" + strings.Repeat("a", 64), ""},
		{"POST", "/v2/templates/x/builds/00000000-0000-4000-8000-000000000000", `{"fromImage": "debian:stable"}`},
	} {
		status, body := ctl(t, srv, c.method, c.path, c.body)
		if status != 403 || !strings.Contains(fmt.Sprint(body["message"]), "operator") {
			t.Errorf("%s %s: %d %v", c.method, c.path, status, body)
		}
	}
	// Looking templates up is everyone's.
	if status, _ := ctl(t, srv, "GET", "/templates", ""); status != 200 {
		t.Errorf("list: %d", status)
	}
}

// A copy step's files go to a URL the server signed; a forged or
// altered URL is refused, and the upload is then present.
func TestTemplateFileUpload(t *testing.T) {
	srv := newOperatorServer(t)
	tid, _ := requestBuild(t, srv, "files")
	hash := strings.Repeat("ab", 32)
	status, link := call(t, "GET", srv.URL+"/templates/"+tid+"/files/"+hash, "", nil)
	url, _ := link["url"].(string)
	if status != 201 || link["present"] != false || !strings.HasPrefix(url, srv.URL+"/codecage/template-files/files/"+hash+"?") {
		t.Fatalf("link: %d %v", status, link)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	_ = tw.WriteHeader(&tar.Header{Name: "folder/test.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hello"))
	_ = tw.Close()
	_ = zw.Close()
	put := func(u string) int {
		req, _ := http.NewRequest("PUT", u, bytes.NewReader(buf.Bytes()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, forged := range []string{
		strings.Replace(url, "token=", "token=0", 1),
		strings.Replace(url, "/files/"+hash, "/other/"+hash, 1),
		strings.Replace(url, "expires=", "expires=9", 1),
	} {
		if got := put(forged); got != 403 {
			t.Errorf("forged %s: %d", forged, got)
		}
	}
	if got := put(url); got != 200 {
		t.Fatalf("upload: %d", got)
	}
	if status, link := call(t, "GET", srv.URL+"/templates/"+tid+"/files/"+hash, "", nil); status != 201 || link["present"] != true {
		t.Fatalf("after the upload: %d %v", status, link)
	}
	if status, _ := call(t, "GET", srv.URL+"/templates/"+tid+"/files/nothex", "", nil); status != 400 {
		t.Errorf("a bad hash: %d", status)
	}
	if status, _ := call(t, "GET", srv.URL+"/templates/never-requested/files/"+hash, "", nil); status != 404 {
		t.Errorf("a template never requested: %d", status)
	}
}

// Template.addMcpServer names servers the gateway runs outside the
// sandbox: a template that names one the operator does not allow fails
// at that step, naming it (one naming allowed servers plans no step for
// them: templateplan's TestTemplatePlans).
func TestTemplateAddMcpServer(t *testing.T) {
	gateway := &upstream.GatewayConfig{Secrets: map[string]upstream.GatewaySecret{"token": {Env: "TOKEN"}}}
	for _, c := range []struct {
		allowed []string
		refused string
	}{
		{allowed: []string{"canary"}, refused: `"github"`},
		{refused: `"canary", "github"`},
	} {
		catalog := upstream.Config{Servers: map[string]upstream.ServerConfig{}}
		for _, n := range c.allowed {
			catalog.Servers[n] = upstream.ServerConfig{Command: "/bin/true", Gateway: gateway}
		}
		srv := newOperatorServerWith(t, &service.Options{Gateways: catalog})
		tid, bid := requestBuild(t, srv, "mcp-tpl")
		if status, _ := call(t, "POST", srv.URL+"/v2/templates/"+tid+"/builds/"+bid, fixture(t, "mcp-servers"), nil); status != 202 {
			t.Fatalf("trigger: %d", status)
		}
		body, _ := waitBuild(t, srv, tid, bid)
		reason, _ := body["reason"].(map[string]any)
		if body["status"] != "error" || reason["step"] != "addMcpServer" || !strings.Contains(fmt.Sprint(reason["message"]), c.refused) {
			t.Errorf("servers the operator does not allow: %v", body)
		}
	}
}
