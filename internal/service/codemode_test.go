package service_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/upstream"
)

const upstreamSecret = "Bearer up-s3cr3t-7f1c"

type addIn struct {
	A int `json:"a" jsonschema:"first addend"`
	B int `json:"b" jsonschema:"second addend"`
}
type addOut struct {
	Sum int `json:"sum"`
}
type msgIn struct {
	Message string `json:"message"`
}

// calcServer is an upstream MCP server over HTTP that wants a bearer
// token: the credential code mode must keep out of the sandbox.
func calcServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "calc", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Adds two integers."}, func(ctx context.Context, req *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
		return nil, addOut{Sum: in.A + in.B}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "shout", Description: "Upper-cases a message."}, func(ctx context.Context, req *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.ToUpper(in.Message)}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."}, func(ctx context.Context, req *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "upstream says no: " + in.Message}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != upstreamSecret {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// recorder keeps the service's events.
type recorder struct {
	mu  sync.Mutex
	evs []service.Event
}

func (r *recorder) Observe(ev service.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

// backends lists the backend of each event of kind, in order.
func (r *recorder) backends(kind string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	for _, ev := range r.evs {
		if ev.Kind == kind {
			out = append(out, ev.Backend)
		}
	}
	return out
}

func (r *recorder) count(kind, outcome string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.evs {
		if ev.Kind == kind && (outcome == "" || ev.Outcome == outcome) {
			n++
		}
	}
	return n
}

func codeModeService(t *testing.T, servers map[string]upstream.ServerConfig) (*service.Service, *recorder) {
	t.Helper()
	cfg := service.LeanTestConfig()
	cfg.PoolSize = 1
	cfg.DataPoolSize = 0
	cfg.StateDir = t.TempDir()
	cfg.AllowedImports = []string{policy.AllImports} // the secret hunt reads /proc
	cfg.Isolation = testBackend(t)
	m := upstream.NewManager(upstream.Config{Servers: servers}, nil)
	t.Cleanup(func() { _ = m.Close() })
	rec := &recorder{}
	svc := newServiceOpts(t, cfg, &service.Options{Upstream: m, Observer: rec})
	return svc, rec
}

func TestCodeModeTools(t *testing.T) {
	srv := calcServer(t)
	svc, rec := codeModeService(t, map[string]upstream.ServerConfig{
		"calc": {URL: srv.URL, Headers: map[string]string{"Authorization": upstreamSecret}},
	})
	ctx := context.Background()
	tools, _, err := svc.CodeTools(ctx)
	if err != nil || len(tools) != 3 || !strings.Contains(tools[0].Signature, "def add(a: int, b: int)") {
		t.Fatalf("code tools: %v %+v", err, tools)
	}
	run := func(req service.Request) *service.Result {
		t.Helper()
		res, err := svc.Execute(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// A loop of 50 calls from one execution; the 51st is over the budget.
	res := run(service.Request{Code: `
total = 0
for i in range(50):
    total += tools.calc.add(i, b=1)["sum"]
print(total)
try:
    tools.calc.add(1, 2)
except ToolError as e:
    print("budget:", e)
`})
	if !res.Success || !strings.HasPrefix(res.Stdout, "1275\nbudget: the run's budget of 50 tool calls is spent") {
		t.Fatalf("loop: %+v %+v", res, res.Error)
	}
	if n := rec.count(service.EventToolCall, "success"); n != 50 {
		t.Fatalf("%d successful tool-call events, want 50", n)
	}
	// Calls from several threads at once each get their own answer (they
	// share one channel: without taking turns, one thread read another's
	// answer and the other waited for it until the run's time limit).
	res = run(service.Request{Code: `
import threading
sums = [None] * 8
def add(i):
    for _ in range(4):
        sums[i] = tools.calc.add(i, b=100)["sum"]
threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sums)
`})
	if !res.Success || res.Stdout != "[100, 101, 102, 103, 104, 105, 106, 107]\n" {
		t.Fatalf("threads: %q %+v", res.Stdout, res.Error)
	}
	// Upstream errors raise ToolError; text results come back as str;
	// help() shows the signature; tools.call works too.
	res = run(service.Request{Code: `
import io, contextlib
try:
    tools.calc.fail(message="nope")
except ToolError as e:
    print("error:", e)
print(tools.call("calc.shout", {"message": "hi"}))
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    help(tools.calc.add)
print("Adds two integers." in buf.getvalue(), "(a: int, b: int)" in buf.getvalue())
try:
    tools.calc.add(1)
except TypeError as e:
    print("TypeError")
`})
	if !res.Success || res.Stdout != "error: upstream says no: nope\nHI\nTrue True\nTypeError\n" {
		t.Fatalf("errors and help: %q %+v", res.Stdout, res.Error)
	}
	// A run scoped to calc.add cannot call the rest.
	res = run(service.Request{Tools: []string{"calc.add"}, Code: `
print(sorted(n for n in dir(tools.calc) if not n.startswith("_")))
try:
    tools.call("calc.shout", {"message": "x"})
except ToolError as e:
    print("refused:", e)
`})
	if !res.Success || !strings.HasPrefix(res.Stdout, "['add']\nrefused: tool \"calc.shout\" is not allowed in this run") {
		t.Fatalf("scope: %q %+v", res.Stdout, res.Error)
	}
	if rec.count(service.EventToolCall, "denied") != 1 {
		t.Fatal("the refused call is not an event")
	}
	if _, err := svc.Execute(ctx, service.Request{Code: "1", Tools: []string{"nosuch.tool"}}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("unknown tool in scope: %v", err)
	}
	// The credential never enters the sandbox: not in the environment, not
	// in any process's memory maps or command line, not on any descriptor.
	res = run(service.Request{Code: `
import os
seen = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for name in ("environ", "cmdline"):
        try:
            seen.append(open("/proc/%s/%s" % (pid, name), "rb").read())
        except OSError:
            pass
print(repr(tools.calc.add.__doc__))
blob = b"".join(seen)
for fd in range(64):
    try:
        blob += os.read(fd, 1 << 16) if fd > 2 and not os.isatty(fd) and fd != 3 else b""
    except OSError:
        pass
print(len(seen) > 0, b"s3cr3t" in blob)
`})
	if !strings.HasSuffix(res.Stdout, "True False\n") || strings.Contains(res.Stdout+res.Stderr, "s3cr3t") {
		t.Fatalf("the upstream's credential is visible in the sandbox: %q", res.Stdout)
	}
	// Sessions have tools too.
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	res = run(service.Request{SessionID: info.ID, Owner: "o", Code: "x = tools.calc.add(2, 3)['sum']"})
	res = run(service.Request{SessionID: info.ID, Owner: "o", Code: "x * tools.calc.add(1, 1)['sum']"})
	if !res.Success || string(res.Result) != "10" {
		t.Fatalf("session: %+v %+v", res, res.Error)
	}
	// Upstream down: a clear error in the code, and the service goes on.
	srv.CloseClientConnections()
	srv.Close()
	res = run(service.Request{Code: `
try:
    tools.calc.add(1, 2)
except ToolError as e:
    print("down:", e)
`})
	if !res.Success || !strings.HasPrefix(res.Stdout, "down: calc.add:") {
		t.Fatalf("upstream down: %q %+v", res.Stdout, res.Error)
	}
	start := time.Now()
	if res := run(service.Request{Code: "print(2+2)", Tools: []string{}}); !res.Success || res.Stdout != "4\n" {
		t.Fatalf("service after the upstream went down: %+v (%v)", res, time.Since(start))
	}
}

// everythingEntry is the official server-everything from the npm registry
// (e2e/upstream), installed when missing (scripts/npm-deps.sh).
func everythingEntry(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "e2e", "upstream"))
	if err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if _, err := os.Stat(entry); err != nil {
		// The one installer of the suite's npm packages: packages run
		// side by side, and two npm ci in one directory would clash.
		cmd := exec.Command("scripts/npm-deps.sh", "e2e/upstream")
		cmd.Dir = filepath.Join(dir, "..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci of %s: %v\n%s", dir, err, out)
		}
	}
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("server-everything: %v", err)
	}
	return entry
}

// TestCodeModeEverything: the official reference server over stdio, its
// secret in its environment only.
func TestCodeModeEverything(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed for the upstream test server: %v", err)
	}
	svc, rec := codeModeService(t, map[string]upstream.ServerConfig{
		"everything": {Command: node, Args: []string{everythingEntry(t), "stdio"}, Env: map[string]string{"SECRET_TOKEN": "evr-s3cr3t-91"}},
	})
	ctx := context.Background()
	tools, _, err := svc.CodeTools(ctx)
	if err != nil || len(tools) < 3 {
		t.Fatalf("tools: %v %+v", err, tools)
	}
	res, err := svc.Execute(ctx, service.Request{Tools: []string{"everything.echo", "everything.get-sum"}, Code: `
import os
outs = [tools.everything.echo(message="m%d" % i) for i in range(49)]
print(outs[0], outs[-1], tools.everything.get_sum(a=2, b=3))
blob = repr(dict(os.environ)).encode()
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("environ", "cmdline"):
            try:
                blob += open("/proc/%s/%s" % (pid, name), "rb").read()
            except OSError:
                pass
print(b"s3cr3t" in blob)
try:
    tools.call("everything.get-env", {})
except ToolError as e:
    print("refused")
`})
	if err != nil || !res.Success {
		t.Fatalf("%v %+v %+v", err, res, res.Error)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "m0") || !strings.Contains(lines[0], "m48") || !strings.Contains(lines[0], "5") || lines[1] != "False" || lines[2] != "refused" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if strings.Contains(res.Stdout+res.Stderr, "s3cr3t") {
		t.Fatal("the upstream's secret reached the sandbox")
	}
	if n := rec.count(service.EventToolCall, "success"); n != 50 {
		t.Fatalf("%d successful calls recorded, want 50", n)
	}
}
