package e2b_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/reexec"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/upstream"
)

// upstreamArg makes this test binary a stdio MCP server: it logs the
// canary it was started with (CANARY_TOKEN, where the operator's gateway
// block puts the creator's token) to UPSTREAM_LOG and serves "whoami".
const upstreamArg = "codecage-test-gateway-upstream"

func init() { reexec.Register(upstreamArg, runTestUpstream) }

func runTestUpstream() int {
	token := os.Getenv("CANARY_TOKEN")
	_ = os.WriteFile(os.Getenv("UPSTREAM_LOG"), []byte("started with token "+token+"\n"), 0o600)
	s := mcp.NewServer(&mcp.Implementation{Name: "canary", Version: "1"}, nil)
	type in struct {
		Name string `json:"name"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "says who it is and whether it holds a token"},
		func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("hello %s from upstream (token %d bytes)", a.Name, len(token))}}}, nil, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// gatewayServer is the E2B surface over a service whose operator allows
// one gateway server, "canary" (this binary as a stdio upstream).
func gatewayServer(t *testing.T) (srv *httptest.Server, stateDir, logFile string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logFile = filepath.Join(t.TempDir(), "upstream.log")
	catalog := upstream.Config{Servers: map[string]upstream.ServerConfig{"canary": {
		Command: exe, Args: []string{upstreamArg}, Env: map[string]string{"UPSTREAM_LOG": logFile},
		Gateway: &upstream.GatewayConfig{Secrets: map[string]upstream.GatewaySecret{"token": {Env: "CANARY_TOKEN"}}},
	}}}
	if err := catalog.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, _, cfg := newE2BServer(t, nil, &service.Options{Gateways: catalog}, "sbx.test:443")
	return srv, cfg.StateDir, logFile
}

// hostTransport sends every request to srv with the Host given (a
// sandbox's port name), as the DNS of a real deployment would.
type hostTransport struct {
	srv   *httptest.Server
	host  string
	token string
}

func (h hostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	u := *r.URL
	u.Scheme, u.Host = "http", strings.TrimPrefix(h.srv.URL, "http://")
	r.URL, r.Host = &u, h.host
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// E2B's MCP gateway, as the SDK drives it: create with `mcp` naming the
// operator's server with a canary token, the SDK's `mcp-gateway` command
// with its access token, getMcpToken's file, and a real MCP client on
// port 50005's /mcp calling the server's tool. The canary reaches the
// server (its log) and nothing of the sandbox's: not its files, not its
// processes' environment, not its log, not the audit events; servers the
// operator did not allow are refused at create, by name.
func TestE2BMCPGatewayKeepsTheSecretsOutside(t *testing.T) {
	srv, stateDir, logFile := gatewayServer(t)
	canary := "canary-" + fmt.Sprint(time.Now().UnixNano())
	for body, says := range map[string]string{
		`{"mcp": {"github": {"githubPersonalAccessToken": "x"}, "slack": {}}}`: `"github", "slack"`,
		`{"mcp": {"canary": {"nope": "x"}}}`:                                   `"nope" is not one of its keys (token)`,
		`{"mcp": {"canary": {"token": 7}}}`:                                    `"token" must be a string`,
		`{"mcp": ["canary"]}`:                                                  "must be an object",
	} {
		status, out := ctl(t, srv, "POST", "/v2/sandboxes", body)
		if status < 400 || status >= 500 || !strings.Contains(fmt.Sprint(out), says) {
			t.Errorf("create %s: %d %v, want a refusal saying %s", body, status, out, says)
		}
		if strings.Contains(fmt.Sprint(out), `"x"`) {
			t.Errorf("the refusal of %s quotes a value: %v", body, out)
		}
	}
	b := createBox(t, srv, `{"templateID": "mcp-gateway", "mcp": {"canary": {"token": "`+canary+`"}}}`)
	token := "0b3f2c9e-6f0a-4bb1-9d0e-1c2d3e4f5a6b"
	cmdline := "mcp-gateway --config '{\"canary\":{\"token\":\"" + canary + "\"}}'"
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", cmdline},
		"envs": map[string]string{"GATEWAY_ACCESS_TOKEN": token}}})
	if raw := startProcess(t, b, msg); !strings.Contains(string(raw), `"exitCode":0`) && !strings.Contains(string(raw), `"end":{"exited":true`) {
		t.Fatalf("the SDK's start of the gateway: %s", raw)
	}
	if status, got := b.daemon("GET", "49983", "/files?path=/etc/mcp-gateway/.token&username=root", ""); status != 200 || got != token {
		t.Fatalf("getMcpToken's file: %d %q", status, got)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	host := "50005-" + b.id + ".sbx.test:443"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Without the gateway's token: refused.
	if _, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + host + "/mcp",
		HTTPClient: &http.Client{Transport: hostTransport{srv: srv, host: host, token: "wrong-token-0000000000"}}}, nil); err == nil {
		t.Error("the gateway let a client in with another token")
	}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + host + "/mcp",
		HTTPClient: &http.Client{Transport: hostTransport{srv: srv, host: host, token: token}}}, nil)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "whoami" {
		t.Fatalf("the gateway's tools: %+v %v", tools, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{"name": "agent"}})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("call whoami: %+v %v", res, err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != fmt.Sprintf("hello agent from upstream (token %d bytes)", len(canary)) {
		t.Errorf("whoami: %q", text)
	}
	if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), canary) {
		t.Errorf("the upstream's log has no canary: %q", log)
	}

	// Nowhere in the sandbox: its files (workspace, root, /tmp), its
	// processes' environment and command lines, its log; judged from the
	// host (the session's directories) and through the service.
	if out, _, exit := runStream(t, b, "echo alive > /tmp/alive && sleep 300 & sleep 0.2; echo ok"); out != "ok\n" || exit != 0 {
		t.Fatalf("a command in the sandbox: %q %d", out, exit)
	}
	ws, err := os.Stat(filepath.Join(stateDir, "sessions", b.id))
	if err != nil {
		t.Fatal(err)
	}
	uid := ws.Sys().(*syscall.Stat_t).Uid
	procs := 0
	for _, pid := range processesOf(uid) {
		procs++
		for _, f := range []string{"environ", "cmdline"} {
			if data, _ := os.ReadFile("/proc/" + pid + "/" + f); strings.Contains(string(data), canary) {
				t.Errorf("the canary in the sandbox's process %s's %s", pid, f)
			}
		}
	}
	if procs == 0 {
		t.Fatalf("no process of the sandbox (uid %d) on the host", uid)
	}
	sessions, _ := filepath.Glob(filepath.Join(stateDir, "sessions", b.id+"*"))
	for _, d := range sessions {
		_ = filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() && fi.Size() < 1<<20 {
				if data, _ := os.ReadFile(p); strings.Contains(string(data), canary) {
					t.Errorf("the canary in the sandbox's %s", p)
				}
			}
			return nil
		})
	}
	status, logs := ctl(t, srv, "GET", "/v2/sandboxes/"+b.id+"/logs?limit=1000", "")
	if raw, _ := json.Marshal(logs); status != 200 || strings.Contains(string(raw), canary) || strings.Contains(string(raw), "mcp-gateway --config") {
		t.Errorf("the sandbox's log (%d) has the gateway's command or canary: %s", status, raw)
	}
	// The server started for the sandbox ends with it.
	if upstreamRuns(logFile) == 0 {
		t.Fatal("no upstream process found while the gateway serves")
	}
	if status, out := ctl(t, srv, "DELETE", "/sandboxes/"+b.id, ""); status != 204 {
		t.Fatalf("kill: %d %v", status, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for upstreamRuns(logFile) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the gateway's server outlived its sandbox")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesOf lists the host's processes whose real uid is uid.
func processesOf(uid uint32) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" && f[1] == fmt.Sprint(uid) {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// upstreamRuns counts the host's processes that are this test's upstream
// for logFile.
func upstreamRuns(logFile string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), upstreamArg) {
			continue
		}
		if env, _ := os.ReadFile("/proc/" + e.Name() + "/environ"); strings.Contains(string(env), "UPSTREAM_LOG="+logFile) {
			n++
		}
	}
	return n
}
