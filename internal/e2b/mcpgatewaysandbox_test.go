package e2b_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/upstream"
)

// sandboxedUpstream is a stdio MCP server in Python, of a few lines, as a
// catalog server would be: it answers whoami with where it runs.
const sandboxedUpstream = `import json, os, sys
# codecage-test-sandboxed-upstream
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    meth = m.get("method")
    if meth == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "sandboxed", "version": "1"}}
    elif meth == "tools/list":
        r = {"tools": [{"name": "whoami", "description": "where it runs", "inputSchema": {"type": "object"}},
                       {"name": "fetch", "description": "GETs a URL", "inputSchema": {"type": "object"}}]}
    elif meth == "tools/call" and m["params"]["name"] == "fetch":
        import urllib.request
        try:
            text = urllib.request.urlopen(m["params"]["arguments"]["url"], timeout=10).read().decode()
        except Exception as e:
            text = "refused: %s" % e
        r = {"content": [{"type": "text", "text": text}]}
    elif meth == "tools/call":
        r = {"content": [{"type": "text", "text": "pid %d token %d bytes" % (os.getpid(), len(os.environ.get("TOKEN", "")))}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no such method"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
`

// A gateway server the operator marks "sandbox" runs in a sandbox of its
// own, not as a process of the server's and not in the code's sandbox:
// judged from the host, its process runs as a sandbox's uid (not the
// code's sandbox's), in a pid namespace of its own, and ends with the
// code's sandbox; its token reaches it, and nothing of the code's.
func TestE2BMCPGatewayServerInASandboxOfItsOwn(t *testing.T) {
	catalog := upstream.Config{Servers: map[string]upstream.ServerConfig{"sandboxed": {
		Command: "/usr/bin/python3", Args: []string{"-c", sandboxedUpstream}, Sandbox: &upstream.SandboxConfig{},
		Gateway: &upstream.GatewayConfig{Secrets: map[string]upstream.GatewaySecret{"token": {Env: "TOKEN"}}},
	}}}
	if err := catalog.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, _, _ := newE2BServer(t, nil, &service.Options{Gateways: catalog}, "sbx.test:443")
	canary := "canary-" + fmt.Sprint(time.Now().UnixNano())
	b := createBox(t, srv, `{"templateID": "mcp-gateway", "mcp": {"sandboxed": {"token": "`+canary+`"}}}`)
	token := "1c4e2d8f-7a0b-4cc2-8e1f-2d3e4f5a6b7c"
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "mcp-gateway --config '{}'"},
		"envs": map[string]string{"GATEWAY_ACCESS_TOKEN": token}}})
	startProcess(t, b, msg)

	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	host := "50005-" + b.id + ".sbx.test:443"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + host + "/mcp",
		HTTPClient: &http.Client{Transport: hostTransport{srv: srv, host: host, token: token}}}, nil)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError || len(res.Content) != 1 {
		t.Fatalf("call whoami: %+v %v", res, err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !strings.HasSuffix(text, fmt.Sprintf("token %d bytes", len(canary))) {
		t.Fatalf("whoami: %q", text)
	}

	// From the host: the server's process.
	var server *leftovers.Process
	for _, p := range leftovers.HostProcesses() {
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline"); strings.Contains(string(cmd), "codecage-test-sandboxed-upstream") {
			server = &p
			break
		}
	}
	if server == nil {
		t.Fatal("no process of the sandboxed server on the host")
	}
	if !leftovers.Leased(server.UID()) {
		t.Errorf("the server runs as uid %d, not a sandbox's", server.UID())
	}
	if ns := strings.Fields(server.Status["NSpid"]); len(ns) < 2 {
		t.Errorf("the server is in the host's pid namespace (NSpid %q)", server.Status["NSpid"])
	}
	// The code's sandbox runs as another uid: its own, not the server's.
	if out, _, exit := runStream(t, b, "id -u"); exit != 0 || strings.TrimSpace(out) == strconv.Itoa(server.UID()) {
		t.Errorf("the code's sandbox's uid %q is the server's", out)
	}
	// It ends with the code's sandbox.
	if status, out := ctl(t, srv, "DELETE", "/sandboxes/"+b.id, ""); status != 204 {
		t.Fatalf("kill: %d %v", status, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		alive := false
		if _, err := os.Stat("/proc/" + strconv.Itoa(server.PID)); err == nil {
			alive = true
		}
		if !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandboxed server outlived the code's sandbox")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A sandboxed server reaches the network its block names, through its
// own sandbox's egress proxy, and nothing else the operator allows.
func TestE2BMCPGatewaySandboxedServerHasItsOwnNetwork(t *testing.T) {
	serve := func(addr string) (string, *atomic.Int64) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		hits := new(atomic.Int64)
		at := l.Addr().String()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			io.WriteString(w, "hello from "+at)
		})}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return l.Addr().String(), hits
	}
	allowed, _ := serve("127.0.0.2:0")
	other, otherHits := serve("127.0.0.3:0")
	catalog := upstream.Config{Servers: map[string]upstream.ServerConfig{"sandboxed": {
		Command: "/usr/bin/python3", Args: []string{"-c", sandboxedUpstream}, Sandbox: &upstream.SandboxConfig{NetworkAllow: []string{"127.0.0.2"}},
		Gateway: &upstream.GatewayConfig{Secrets: map[string]upstream.GatewaySecret{"token": {Env: "TOKEN"}}},
	}}}
	srv, _, _ := newE2BServer(t, func(c *config.Config) {
		c.EnableNetwork, c.NetworkAllow = true, []string{allowed, other}
	}, &service.Options{Gateways: catalog}, "sbx.test:443")
	b := createBox(t, srv, `{"templateID": "mcp-gateway", "mcp": {"sandboxed": {"token": "t"}}}`)
	token := "2d5f3e9a-8b1c-4dd3-9f2a-3e4f5a6b7c8d"
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "mcp-gateway --config '{}'"},
		"envs": map[string]string{"GATEWAY_ACCESS_TOKEN": token}}})
	startProcess(t, b, msg)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	host := "50005-" + b.id + ".sbx.test:443"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + host + "/mcp",
		HTTPClient: &http.Client{Transport: hostTransport{srv: srv, host: host, token: token}}}, nil)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	defer cs.Close()
	fetch := func(url string) string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": url}})
		if err != nil || len(res.Content) != 1 {
			t.Fatalf("fetch %s: %+v %v", url, res, err)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	if got := fetch("http://" + allowed + "/"); got != "hello from "+allowed {
		t.Errorf("the server's own network: %q", got)
	}
	if got := fetch("http://" + other + "/"); !strings.HasPrefix(got, "refused") || otherHits.Load() != 0 {
		t.Errorf("a host the operator allows but the server's block does not: %q, %d hits", got, otherHits.Load())
	}
}
