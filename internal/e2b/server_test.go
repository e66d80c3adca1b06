package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

func TestMain(m *testing.M) {
	jail.MaybeRunInit() // the test binary is re-executed as the sandbox init
	os.Exit(m.Run())
}

const aliceKey = "e2b_00112233445566778899"

// newServer is the E2B surface over a real service, on loopback.
func newServer(t *testing.T) (*httptest.Server, *service.Service) {
	t.Helper()
	return newServerWith(t, nil)
}

// newServerWith is newServer with the configuration changed by tune.
func newServerWith(t *testing.T, tune func(*config.Config)) (*httptest.Server, *service.Service) {
	t.Helper()
	srv, svc, _ := newE2BServer(t, tune, nil, "")
	return srv, svc
}

// newE2BServer is newServerWith with the service's options and the
// sandboxes' domain (getHost's), and the configuration it ran with.
func newE2BServer(t *testing.T, tune func(*config.Config), opts *service.Options, domain string) (*httptest.Server, *service.Service, config.Config) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.SessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	cfg.AllowedCommands = policy.WithE2BCommands(cfg.AllowedCommands) // as serve does with --e2b-listen
	if tune != nil {
		tune(&cfg)
	}
	svc, err := service.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	keys, err := access.ParseKeys("alice:" + aliceKey + ",bob:" + bobKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e2b.New(svc, e2b.Options{Keys: keys, Config: cfg, Domain: domain}))
	t.Cleanup(srv.Close)
	return srv, svc, cfg
}

func call(t *testing.T, method, url, body string, header map[string]string) (int, map[string]any) {
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
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

// Bad requests to the control plane get E2B's error body with a reason;
// an unknown sandbox is {"code": 404}, which the SDK reads as not found.
func TestControlPlaneRefusesBadInput(t *testing.T) {
	srv, _ := newServer(t)
	key := map[string]string{"X-API-KEY": aliceKey}
	for name, tc := range map[string]struct {
		method, path, body string
		status             int
		says               string
	}{
		"not JSON":         {"POST", "/v2/sandboxes", "{", 400, "JSON"},
		"timeout absurd":   {"POST", "/v2/sandboxes", `{"timeout": 999999999}`, 400, "out of range"},
		"timeout too long": {"POST", "/v2/sandboxes", `{"timeout": 86000}`, 400, "SANDBOX_SESSION_MAX_LIFETIME"},
		// E2B's 404 for a template it does not know, as REST's for an
		// unknown environment; a profile list naming an unknown one is 400.
		"unknown template":   {"POST", "/v2/sandboxes", `{"templateID": "no-such-profile"}`, 404, "no-such-profile"},
		"unknown profile":    {"POST", "/v2/sandboxes", `{"templateID": "basic+no-such-profile"}`, 400, "no-such-profile"},
		"env LD_PRELOAD":     {"POST", "/v2/sandboxes", `{"envVars": {"LD_PRELOAD": "/x.so"}}`, 400, "LD_PRELOAD"},
		"unknown sandbox":    {"GET", "/sandboxes/snope", "", 404, "not found"},
		"kill unknown":       {"DELETE", "/sandboxes/snope", "", 404, "not found"},
		"bad timeout body":   {"POST", "/sandboxes/snope/timeout", `{"timeout": -1}`, 400, "timeout"},
		"pause unknown":      {"POST", "/sandboxes/snope/pause", "", 404, "not found"},
		"fork unknown":       {"POST", "/sandboxes/snope/fork", "", 404, "not found"},
		"fork count 0":       {"POST", "/sandboxes/snope/fork", `{"count": 0}`, 400, "count must be 1 to 100"},
		"fork count 101":     {"POST", "/sandboxes/snope/fork", `{"count": 101}`, 400, "count must be 1 to 100"},
		"snapshot unknown":   {"POST", "/sandboxes/snope/snapshots", "{}", 404, "not found"},
		"snapshot name long": {"POST", "/sandboxes/snope/snapshots", `{"name": "` + strings.Repeat("n", 129) + `"}`, 400, "at most 128 bytes"},
		"snapshot name ctrl": {"POST", "/sandboxes/snope/snapshots", `{"name": "a\u0000b"}`, 400, "not printable"},
		"list bad state":     {"GET", "/v2/sandboxes?state=running,gone", "", 400, "gone"},
		"list bad order":     {"GET", "/v2/sandboxes?order=up", "", 400, "asc or desc"},
		"metrics unknown":    {"GET", "/sandboxes/snope/metrics", "", 404, "not found"},
		"metrics bad start":  {"GET", "/sandboxes/snope/metrics?start=yesterday", "", 400, "Unix times"},
		"logs unknown":       {"GET", "/sandboxes/snope/logs", "", 404, "not found"},
		"logs bad start":     {"GET", "/sandboxes/snope/logs?start=yesterday", "", 400, "milliseconds"},
		"logs bad limit":     {"GET", "/v2/sandboxes/snope/logs?limit=5000", "", 400, "0 to 1000"},
		"logs bad direction": {"GET", "/v2/sandboxes/snope/logs?direction=up", "", 400, "forward or backward"},
		"network unknown":    {"PUT", "/sandboxes/snope/network", "{}", 404, "not found"},
		"network bad body":   {"PUT", "/sandboxes/snope/network", "{\"allowOut\": 1}", 400, "allowOut"},
		"no such route":      {"GET", "/nope", "", 404, "no such route"},
	} {
		status, body := call(t, tc.method, srv.URL+tc.path, tc.body, key)
		msg, _ := body["message"].(string)
		if status != tc.status || body["code"] != float64(tc.status) || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %v, want %d saying %q", name, status, body, tc.status, tc.says)
		}
	}
	if status, body := call(t, "POST", srv.URL+"/v2/sandboxes", "{}", map[string]string{"X-API-KEY": "e2b_wrong"}); status != 401 || body["code"] != float64(401) {
		t.Errorf("a wrong key: %d %v", status, body)
	}
}

// The daemon's Connect services, through connect-go's client: errors
// carry the codes the SDK maps (not_found, unimplemented, ...), and a
// killed sandbox answers 502.
func TestDaemonErrorsAndGoneSandbox(t *testing.T) {
	srv, _ := newServer(t)
	status, created := call(t, "POST", srv.URL+"/v2/sandboxes", `{"templateID": "base", "timeout": 60}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 || created["envdVersion"] != e2b.EnvdVersion {
		t.Fatalf("create: %d %v", status, created)
	}
	id, token := created["sandboxID"].(string), created["envdAccessToken"].(string)
	in := func(port string) connect.ClientOption {
		return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("E2b-Sandbox-Id", id)
				req.Header().Set("E2b-Sandbox-Port", port)
				req.Header().Set("X-Access-Token", token)
				return next(ctx, req)
			}
		}))
	}
	opts := []connect.ClientOption{connect.WithProtoJSON(), connect.WithCodec(testCodec{}), in("49983")}
	stat := connect.NewClient[map[string]any, map[string]any](http.DefaultClient, srv.URL+"/filesystem.Filesystem/Stat", opts...)
	signal := connect.NewClient[map[string]any, map[string]any](http.DefaultClient, srv.URL+"/process.Process/SendSignal", opts...)
	client := func(proc string) *connect.Client[map[string]any, map[string]any] {
		return connect.NewClient[map[string]any, map[string]any](http.DefaultClient, srv.URL+"/filesystem.Filesystem/"+proc, opts...)
	}
	create, events, remove := client("CreateWatcher"), client("GetWatcherEvents"), client("RemoveWatcher")
	ctx := context.Background()
	codeOf := func(err error) connect.Code {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return ce.Code()
		}
		return 0
	}
	if _, err := stat.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "/home/user/none"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("stat of a missing file: %v", err)
	}
	res, err := stat.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "~"}))
	if err != nil || (*res.Msg)["entry"].(map[string]any)["type"] != "FILE_TYPE_DIRECTORY" {
		t.Errorf("stat of ~: %v %v", res, err)
	}
	if _, err := stat.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "/proc/1/environ"})); codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "/home/user") {
		t.Errorf("stat of what the file API does not reach: %v", err)
	}
	if _, err := signal.CallUnary(ctx, connect.NewRequest(&map[string]any{"process": map[string]any{"pid": 7}, "signal": "SIGNAL_SIGKILL"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("signal to an unknown pid: %v", err)
	}
	if _, err := signal.CallUnary(ctx, connect.NewRequest(&map[string]any{"process": map[string]any{"pid": 7}, "signal": "SIGNAL_SIGHUP"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("an unknown signal: %v", err)
	}
	// The polling watch (the Python SDK's): envd's codes and names.
	if _, err := create.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "missing_dir"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("CreateWatcher of a missing directory: %v", err)
	}
	if w, err := create.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "/home/user", "recursive": true})); err != nil {
		t.Errorf("CreateWatcher: %v", err)
	} else {
		wid := (*w.Msg)["watcherId"]
		if _, err := client("MakeDir").CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "watched"})); err != nil {
			t.Fatal(err)
		}
		var got []any
		for range 50 {
			res, err := events.CallUnary(ctx, connect.NewRequest(&map[string]any{"watcherId": wid}))
			if err != nil {
				t.Fatalf("GetWatcherEvents: %v", err)
			}
			if got, _ = (*res.Msg)["events"].([]any); len(got) > 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(got) == 0 || got[0].(map[string]any)["name"] != "watched" || got[0].(map[string]any)["type"] != "EVENT_TYPE_CREATE" {
			t.Errorf("GetWatcherEvents after a MakeDir: %v", got)
		}
		if _, err := remove.CallUnary(ctx, connect.NewRequest(&map[string]any{"watcherId": wid})); err != nil {
			t.Errorf("RemoveWatcher: %v", err)
		}
		if _, err := events.CallUnary(ctx, connect.NewRequest(&map[string]any{"watcherId": wid})); codeOf(err) != connect.CodeNotFound {
			t.Errorf("GetWatcherEvents of a removed watcher: %v", err)
		}
	}

	// /execute: a language no kernel here runs is a 404 naming the
	// kernels that run (the SDK's NotFoundError, with this text).
	status, body := call(t, "POST", srv.URL+"/execute", `{"code": "1", "language": "r"}`,
		map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "X-Access-Token": token})
	if raw, _ := body["raw"].(string); status != 404 || !strings.Contains(raw, `no kernel for language "r"`) || !strings.Contains(raw, "runs python") {
		t.Errorf("language r: %d %v", status, body)
	}
	if status, _ := call(t, "GET", srv.URL+"/health", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "8080", "X-Access-Token": token}); status != 502 {
		t.Errorf("a port nothing listens on: %d", status)
	}

	// Killed: every call into it is a 502, and the control plane says 404.
	if status, _ := call(t, "DELETE", srv.URL+"/sandboxes/"+id, "", map[string]string{"X-API-KEY": aliceKey}); status != 204 {
		t.Fatalf("kill: %d", status)
	}
	if _, err := stat.CallUnary(ctx, connect.NewRequest(&map[string]any{"path": "~"})); codeOf(err) != connect.CodeUnavailable {
		t.Errorf("stat in a killed sandbox: %v", err)
	}
	if status, _ := call(t, "GET", srv.URL+"/health", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}); status != 502 {
		t.Errorf("health of a killed sandbox: %d", status)
	}
	if status, body := call(t, "POST", srv.URL+"/v2/sandboxes/"+id+"/connect", "{}", map[string]string{"X-API-KEY": aliceKey}); status != 404 || body["code"] != float64(404) {
		t.Errorf("connect to a killed sandbox: %d %v", status, body)
	}
}

// A sandbox ends at its timeout, and its commands with it.
func TestSandboxEndsAtItsTimeout(t *testing.T) {
	srv, _ := newServer(t)
	_, created := call(t, "POST", srv.URL+"/v2/sandboxes", `{"timeout": 1}`, map[string]string{"X-API-KEY": aliceKey})
	id, token := created["sandboxID"].(string), created["envdAccessToken"].(string)
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, _ := call(t, "GET", srv.URL+"/health", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": token})
		if status == 502 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox outlived its timeout")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testCodec is a JSON codec over any Go value (the SDK's messages are
// JSON; this test has no protobuf types either).
type testCodec struct{}

func (testCodec) Name() string                  { return "json" }
func (testCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (testCodec) Unmarshal(b []byte, v any) error {
	return json.NewDecoder(bytes.NewReader(b)).Decode(v)
}
