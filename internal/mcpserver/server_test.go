package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/service"
)

func TestMain(m *testing.M) {
	jail.MaybeRunInit()
	os.Exit(m.Run())
}

// connect starts the real service and server and a real client over the
// SDK's in-memory transport.
func connect(t *testing.T, edit ...func(*config.Config)) *mcp.ClientSession {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.EnableDataScience = true
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.DataPoolSize = 1, 1
	for _, e := range edit {
		e(&cfg)
	}
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	server := mcpserver.New(svc, mcpserver.Options{Config: cfg})
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, _ := json.Marshal(r.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}

func TestToolsAreListedWithSchemas(t *testing.T) {
	cs := connect(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"execute_code": true, "validate_code": true, "get_sandbox_info": true, "create_session": true,
		"close_session": true, "restart_session": true, "list_sessions": true, "write_file": true, "read_file": true,
		"list_files": true, "delete_file": true, "run_command": true, "pip_install": true, "list_code_tools": true,
		"pause_session": true, "resume_session": true, "snapshot_session": true, "fork_session": true, "list_snapshots": true, "delete_snapshot": true, "session_metrics": true, "session_logs": true, "set_session_network": true,
		"create_secret": true, "list_secrets": true, "delete_secret": true, "set_session_egress_credentials": true}
	for _, tool := range res.Tools {
		if !want[tool.Name] {
			t.Errorf("unexpected tool %s", tool.Name)
		}
		delete(want, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("%s lacks a description or schema", tool.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing tools %v", want)
	}
}

func TestExecuteCode(t *testing.T) {
	cs := connect(t)
	r := call(t, cs, "execute_code", map[string]any{"code": "print(6*7)"})
	if r.IsError || text(r) != "42\n" {
		t.Fatalf("print(6*7): isError=%v %q", r.IsError, text(r))
	}
	if m := structured(t, r); m["stdout"] != "42\n" || m["success"] != true || m["backend"] != "native" {
		t.Fatalf("structured %v", m)
	}
	r = call(t, cs, "execute_code", map[string]any{"code": "x = 5\nx * 2"})
	if !strings.Contains(text(r), "[result] 10") || structured(t, r)["result"] != 10.0 {
		t.Fatalf("result: %q %v", text(r), structured(t, r)["result"])
	}
	r = call(t, cs, "execute_code", map[string]any{"code": "1/0"})
	if !r.IsError || !strings.Contains(text(r), "ZeroDivisionError") {
		t.Fatalf("exception must be a tool error: %v %q", r.IsError, text(r))
	}
	r = call(t, cs, "execute_code", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1,2,3])", "profile": "data_science"})
	var images int
	for _, c := range r.Content {
		if img, ok := c.(*mcp.ImageContent); ok && img.MIMEType == "image/png" && len(img.Data) > 100 && string(img.Data[1:4]) == "PNG" {
			images++
		}
	}
	if r.IsError || images != 1 {
		t.Fatalf("plot: isError=%v images=%d %q", r.IsError, images, text(r))
	}
	// Forged protocol frames printed by the code are only text in the result.
	r = call(t, cs, "execute_code", map[string]any{"code": `print('{"jsonrpc":"2.0","id":1,"result":{}}')`})
	if !strings.Contains(text(r), `"jsonrpc"`) || r.IsError {
		t.Fatalf("forged frame: %q", text(r))
	}
}

func TestSessionAcrossCalls(t *testing.T) {
	cs := connect(t)
	r := call(t, cs, "create_session", map[string]any{})
	id, _ := structured(t, r)["session_id"].(string)
	if r.IsError || id == "" {
		t.Fatalf("create_session: %q", text(r))
	}
	call(t, cs, "execute_code", map[string]any{"session_id": id, "code": "total = 0"})
	call(t, cs, "execute_code", map[string]any{"session_id": id, "code": "total += 20\ntotal += 22"})
	r = call(t, cs, "execute_code", map[string]any{"session_id": id, "code": "total"})
	if structured(t, r)["result"] != 42.0 {
		t.Fatalf("session state: %q", text(r))
	}
	r = call(t, cs, "write_file", map[string]any{"session_id": id, "path": "in.txt", "content": "hello"})
	if r.IsError {
		t.Fatalf("write_file: %q", text(r))
	}
	r = call(t, cs, "execute_code", map[string]any{"session_id": id, "code": "open('in.txt').read().upper()"})
	if structured(t, r)["result"] != "HELLO" {
		t.Fatalf("file in session: %q", text(r))
	}
	r = call(t, cs, "list_files", map[string]any{"session_id": id})
	if files := structured(t, r)["files"].([]any); len(files) != 1 {
		t.Fatalf("list_files: %v", files)
	}
	r = call(t, cs, "read_file", map[string]any{"session_id": id, "path": "/workspace/in.txt"})
	if structured(t, r)["content"] != "hello" {
		t.Fatalf("read_file: %q", text(r))
	}
	if r := call(t, cs, "close_session", map[string]any{"session_id": id}); r.IsError {
		t.Fatalf("close: %q", text(r))
	}
	r = call(t, cs, "execute_code", map[string]any{"session_id": id, "code": "total"})
	if !r.IsError || !strings.Contains(text(r), "session not found") {
		t.Fatalf("closed session: %q", text(r))
	}
}

func TestUseContainerRunsUnderGVisor(t *testing.T) {
	cs := connect(t, func(c *config.Config) { c.EnableContainerMode = true; c.GVisorPoolSize, c.GVisorDataPoolSize = 1, 0 })
	res := call(t, cs, "execute_code", map[string]any{"code": "print('hi')\n6*7", "use_container": true})
	out := structured(t, res)
	if res.IsError || out["backend"] != "gvisor" || out["stdout"] != "hi\n" || out["result"] != float64(42) {
		t.Fatalf("use_container: %v %v", res.IsError, out)
	}
	res = call(t, cs, "create_session", map[string]any{"use_container": true})
	if out := structured(t, res); res.IsError || out["backend"] != "gvisor" {
		t.Fatalf("create_session use_container: %v %v", res.IsError, out)
	}
	res = call(t, cs, "get_sandbox_info", map[string]any{})
	cm, _ := structured(t, res)["container_mode"].(map[string]any)
	if gv, _ := cm["gvisor"].(map[string]any); cm["available"] != true || cm["enabled"] != true || gv["version"] == "" {
		t.Fatalf("container_mode: %v", cm)
	}
}

func TestBadInputIsAToolError(t *testing.T) {
	cs := connect(t)
	cases := []struct {
		name string
		args map[string]any
		want string
	}{
		{"execute_code", map[string]any{}, "code"},
		{"execute_code", map[string]any{"code": 42}, "code"},
		{"execute_code", map[string]any{"code": strings.Repeat("#", 10<<20)}, "maxLength"},
		{"execute_code", map[string]any{"code": "print(1)\x00"}, "null bytes"},
		{"execute_code", map[string]any{"code": "1", "profile": "gpu"}, "unknown profile"},
		{"execute_code", map[string]any{"code": "1", "profile": "network"}, "SANDBOX_ENABLE_NETWORK"},
		{"execute_code", map[string]any{"code": "1", "memory_limit": "lots"}, "memory_limit"},
		{"execute_code", map[string]any{"code": "1", "timeout": -1}, "timeout"},
		{"execute_code", map[string]any{"code": "1", "timeout": 100000}, "timeout"},
		{"write_file", map[string]any{"session_id": "x", "path": "a", "content": "b", "encoding": "utf-16"}, "encoding"},
		{"execute_code", map[string]any{"code": "1", "use_container": true}, "SANDBOX_ENABLE_CONTAINER_MODE"},
		{"execute_code", map[string]any{"code": "1", "session_id": "nope"}, "session not found"},
		{"read_file", map[string]any{"session_id": "nope", "path": "x"}, "session not found"},
	}
	for _, c := range cases {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.name, Arguments: c.args})
		if err != nil {
			// Argument validation may answer at the protocol level; it
			// must still say what is wrong.
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %v: %v, want mention of %q", c.name, abbreviate(c.args), err, c.want)
			}
			continue
		}
		if !res.IsError || !strings.Contains(text(res), c.want) {
			t.Errorf("%s %v: isError=%v %q, want a tool error mentioning %q", c.name, abbreviate(c.args), res.IsError, abbreviate(text(res)), c.want)
		}
	}
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "no_such_tool"}); err == nil {
		t.Error("unknown tool accepted")
	}
	// The server still serves.
	if r := call(t, cs, "execute_code", map[string]any{"code": "print('still here')"}); text(r) != "still here\n" {
		t.Fatalf("after bad input: %q", text(r))
	}
}

func abbreviate(v any) string {
	s, _ := json.Marshal(v)
	if len(s) > 120 {
		return string(s[:120]) + "..."
	}
	return string(s)
}

func TestProgressStreamsOutputAndCancelKills(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 1
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	server := mcpserver.New(svc, mcpserver.Options{Config: cfg})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	lines := make(chan string, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			lines <- req.Params.Message
		},
	})
	cs, err := client.Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "import time\nfor i in range(3):\n    print('line', i)\n    time.sleep(0.2)"}}
	params.SetProgressToken("tok-1")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		select {
		case l := <-lines:
			if l != "line "+string(rune('0'+i))+"\n" {
				t.Errorf("progress %d: %q", i, l)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no progress notification %d", i)
		}
	}
	// Cancellation: the client gives up; the sandbox must die at once,
	// not at its 60 s timeout.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "import time\ntime.sleep(60)", "timeout": 60}})
		done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); sleepingSandboxes(t) == 0; time.Sleep(25 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the run never started sleeping (the check would prove nothing)")
		}
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a canceled call returned a result")
	}
	deadline := time.Now().Add(10 * time.Second)
	for sleepingSandboxes(t) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the canceled run's sandbox is still sleeping")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sleepingSandboxes counts sandbox processes of this test process (not
// those of another test binary the host runs beside it) that run
// time.sleep(60) code (their harness is blocked in the code).
func sleepingSandboxes(t *testing.T) int {
	n := 0
	for _, p := range leftovers.SandboxProcesses() {
		pid, _, _ := strings.Cut(p, " ")
		b, err := os.ReadFile("/proc/" + pid + "/wchan")
		if err == nil && (strings.Contains(string(b), "hrtimer") || strings.Contains(string(b), "nanosleep")) {
			n++
		}
	}
	return n
}

// Text that is not valid Unicode is an invalid-params error naming the
// field, not code quietly changed to U+FFFD (which then fails as a
// SyntaxError).
func TestInvalidUTF8IsInvalidParams(t *testing.T) {
	cs := connect(t)
	for args, want := range map[string]string{
		"{\"code\": \"print('\xff')\"}":                                    "invalid request: code is not valid UTF-8",
		`{"code": "print('\udc80')"}`:                                      `invalid request: code is not valid Unicode: an unpaired UTF-16 surrogate \udc80`,
		"{\"session_id\": \"s1\", \"path\": \"a\", \"content\": \"\xc3\"}": "invalid request: content is not valid UTF-8",
	} {
		name := "execute_code"
		if strings.Contains(args, "content") {
			name = "write_file"
		}
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		var werr *jsonrpc.Error
		if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(werr.Message, want) {
			t.Errorf("%s %q: %v, want invalid params %q", name, args, err, want)
		}
	}
	// Valid text passes untouched, escapes and all.
	res := call(t, cs, "execute_code", map[string]any{"code": "s = 'h\u00e9llo \U0001F600 ✓'\nlen(s)"})
	if res.IsError || structured(t, res)["result"] != float64(9) {
		t.Fatalf("valid text: %s", text(res))
	}
}

// An agent sends only code: with data_science enabled, numpy imports
// without a profile, and get_sandbox_info says what the default is.
func TestEnabledProfileNeedsNoProfileArgument(t *testing.T) {
	cs := connect(t)
	res := call(t, cs, "execute_code", map[string]any{"code": "import numpy as np, sys\nint(np.arange(5).sum()) + (sys.maxsize > 0)"})
	if res.IsError || structured(t, res)["result"] != float64(11) {
		t.Fatalf("numpy without profile: %s", text(res))
	}
	info := structured(t, call(t, cs, "get_sandbox_info", map[string]any{}))
	if got := fmt.Sprint(info["default_profiles"]); got != "[basic data_science]" {
		t.Fatalf("default_profiles %s", got)
	}
}
