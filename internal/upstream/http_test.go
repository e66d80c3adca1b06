package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestHTTPUpstream(t *testing.T) {
	const token = "tok-123"
	ts := newTestServer(token)
	hs := ts.start(t)
	t.Setenv("UPSTREAM_TEST_VAR", "from the server's environment")
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"calc": {
			URL:         hs.URL,
			Headers:     map[string]string{"Authorization": "Bearer " + token},
			CallTimeout: Duration(500 * time.Millisecond),
		},
	}}, log)
	defer closeManager(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A listing that takes longer than the 500 ms call timeout (a dial
	// and a list under -race, beside other packages) leaves the server
	// out until a later listing: wait for one that has it.
	want := []string{"calc.add", "calc.echo_env", "calc.fail", "calc.slow"}
	var tools []Tool
	for {
		var err error
		if tools, err = m.Tools(ctx); err != nil {
			t.Fatal(err)
		}
		if len(tools) > 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // between polls: a failed dial backs off
	}
	if got := toolNames(tools); !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v (status %+v)", got, want, m.Status())
	}
	add := tools[0]
	if add.Server != "calc" || add.Name != "add" || add.Description != "Adds two integers." {
		t.Errorf("add = %+v", add)
	}
	props, _ := add.InputSchema["properties"].(map[string]any)
	a, _ := props["a"].(map[string]any)
	if add.InputSchema["type"] != "object" || a["type"] != "integer" || a["description"] != "the first addend" {
		t.Errorf("add input schema = %v", add.InputSchema)
	}
	if req, _ := add.InputSchema["required"].([]any); !reflect.DeepEqual(req, []any{"a", "b"}) {
		t.Errorf("add required = %v", add.InputSchema["required"])
	}
	if add.OutputSchema == nil || add.OutputSchema["type"] != "object" {
		t.Errorf("add output schema = %v", add.OutputSchema)
	}
	if tools[1].OutputSchema != nil {
		t.Errorf("echo_env has an output schema: %v", tools[1].OutputSchema)
	}
	const wantSig = `def add(a: int, b: int) -> dict:
    """Adds two integers.

    Args:
        a: the first addend
        b: the second addend
    """
`
	if got := Signature(add); got != wantSig {
		t.Errorf("Signature(add) =\n%s\nwant\n%s", got, wantSig)
	}

	got, err := m.Tool(ctx, "calc", "slow")
	if err != nil || got.Description != "Takes its time." {
		t.Errorf("Tool(calc, slow) = %+v, %v", got, err)
	}
	if _, err := m.Tool(ctx, "calc", "nope"); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("Tool(calc, nope) error = %v, want ErrUnknownTool", err)
	}
	if _, err := m.Tool(ctx, "nope", "add"); !errors.Is(err, ErrUnknownServer) {
		t.Errorf("Tool(nope, add) error = %v, want ErrUnknownServer", err)
	}

	t.Run("structured", func(t *testing.T) {
		res, err := m.Call(ctx, "calc", "add", map[string]any{"a": 2, "b": 40})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || !reflect.DeepEqual(res.Structured, map[string]any{"sum": float64(42)}) || res.Text != `{"sum":42}` {
			t.Errorf("add(2, 40) = %#v", res)
		}
	})
	t.Run("text", func(t *testing.T) {
		res, err := m.Call(ctx, "calc", "echo_env", map[string]any{"name": "UPSTREAM_TEST_VAR"})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.Structured != nil || res.Text != "from the server's environment" {
			t.Errorf("echo_env = %#v", res)
		}
	})
	t.Run("tool error", func(t *testing.T) {
		res, err := m.Call(ctx, "calc", "fail", map[string]any{"message": "it broke"})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || res.Text != "it broke" {
			t.Errorf("fail = %#v", res)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		if _, err := m.Call(ctx, "calc", "nope", nil); !errors.Is(err, ErrUnknownTool) {
			t.Errorf("Call(calc, nope) error = %v, want ErrUnknownTool", err)
		}
		if _, err := m.Call(ctx, "nope", "add", nil); !errors.Is(err, ErrUnknownServer) {
			t.Errorf("Call(nope, add) error = %v, want ErrUnknownServer", err)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		res, err := m.Call(ctx, "calc", "add", map[string]any{"a": "two"})
		// The server may answer with a JSON-RPC error or a tool error; either
		// way the session stays up and nothing is "unavailable".
		if errors.Is(err, ErrUnavailable) || (err == nil && !res.IsError) {
			t.Errorf("add(a=two) = %#v, %v", res, err)
		}
		if _, err := m.Call(ctx, "calc", "add", map[string]any{"a": make(chan int)}); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("add(a=chan) error = %v", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		_, err := m.Call(ctx, "calc", "slow", map[string]any{"seconds": 20})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow(20) error = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("slow(20) with a 0.5s timeout took %v", d)
		}
		mustContain(t, err.Error(), "no result within 500ms")
		// The session survives a timeout.
		res, err := m.Call(ctx, "calc", "slow", map[string]any{"seconds": 0.01})
		if err != nil || res.Text != "done" {
			t.Errorf("slow(0.01) = %#v, %v", res, err)
		}
		// The caller's own deadline is reported as the caller's.
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = m.Call(short, "calc", "slow", map[string]any{"seconds": 20})
		if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "no result within") {
			t.Errorf("slow(20) under a 100ms context: %v", err)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		// A manager of its own: 64 calls at once under -race on a busy
		// machine can take longer than the 500ms the timeout case needs.
		many := NewManager(Config{Servers: map[string]ServerConfig{
			"calc": {
				URL:         hs.URL,
				Headers:     map[string]string{"Authorization": "Bearer " + token},
				CallTimeout: Duration(30 * time.Second),
			},
		}}, log)
		defer closeManager(t, many)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Go(func() {
				res, err := many.Call(ctx, "calc", "add", map[string]any{"a": i, "b": 1000})
				if err != nil {
					errs <- err
					return
				}
				if s, _ := res.Structured.(map[string]any); s["sum"] != float64(i+1000) {
					errs <- errors.New("wrong sum: " + res.Text)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("list changed", func(t *testing.T) {
		mcp.AddTool(ts.mcp, &mcp.Tool{Name: "late", Description: "Added later."},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return text("late"), nil, nil
			})
		deadline := time.Now().Add(10 * time.Second)
		for {
			tools, err := m.Tools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(toolNames(tools), "calc.late") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("calc.late did not appear after tools/list_changed: %v", toolNames(tools))
			}
			time.Sleep(50 * time.Millisecond)
		}
		res, err := m.Call(ctx, "calc", "late", nil)
		if err != nil || res.Text != "late" {
			t.Errorf("late() = %#v, %v", res, err)
		}
	})

	st := statusOf(m, "calc")
	if !st.Connected || st.Transport != "http" || st.Tools != 5 || st.Error != "" {
		t.Errorf("status = %+v", st)
	}
	if ts.refused.Load() != 0 || ts.authorized.Load() == 0 {
		t.Errorf("server saw %d requests with the token and %d without", ts.authorized.Load(), ts.refused.Load())
	}
}

func TestHTTPWrongToken(t *testing.T) {
	ts := newTestServer("right")
	hs := ts.start(t)
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"wrong":   {URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer wrong"}},
		"missing": {URL: hs.URL},
		"right":   {URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer right"}},
	}}, log)
	defer closeManager(t, m)
	ctx := context.Background()
	tools, err := m.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		if tool.Server != "right" {
			t.Errorf("tool of an unauthorized server listed: %s", tool.QualifiedName())
		}
	}
	if len(tools) != 4 {
		t.Errorf("tools = %v", toolNames(tools))
	}
	for _, name := range []string{"wrong", "missing"} {
		st := statusOf(m, name)
		if st.Connected || !strings.Contains(st.Error, "Unauthorized") {
			t.Errorf("status of %s = %+v", name, st)
		}
		if _, err := m.Call(ctx, name, "add", map[string]any{"a": 1, "b": 2}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Call(%s) error = %v, want ErrUnavailable", name, err)
		}
	}
	if ts.refused.Load() == 0 {
		t.Error("the server refused nothing")
	}
}

func TestHTTPToolsFilter(t *testing.T) {
	ts := newTestServer("t")
	hs := ts.start(t)
	log, logs := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"calc": {URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer t"}, Tools: []string{"fail", "add", "absent"}},
	}}, log)
	defer closeManager(t, m)
	ctx := context.Background()
	tools, err := m.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(tools); !slices.Equal(got, []string{"calc.add", "calc.fail"}) {
		t.Errorf("tools = %v", got)
	}
	for _, name := range []string{"echo_env", "absent"} {
		if _, err := m.Call(ctx, "calc", name, nil); !errors.Is(err, ErrUnknownTool) {
			t.Errorf("Call(%s) error = %v, want ErrUnknownTool", name, err)
		}
		if _, err := m.Tool(ctx, "calc", name); !errors.Is(err, ErrUnknownTool) {
			t.Errorf("Tool(%s) error = %v, want ErrUnknownTool", name, err)
		}
	}
	if res, err := m.Call(ctx, "calc", "add", map[string]any{"a": 1, "b": 1}); err != nil || res.Text != `{"sum":2}` {
		t.Errorf("add = %#v, %v", res, err)
	}
	if st := statusOf(m, "calc"); st.Tools != 2 {
		t.Errorf("status = %+v", st)
	}
	mustContain(t, logs.String(), `tool=absent`)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// serveAt starts ts on addr.
func serveAt(t *testing.T, ts *testServer, addr string) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s again: %v", addr, err)
	}
	hs := httptest.NewUnstartedServer(ts.handler)
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(func() { ts.shutdown(hs) })
	return hs
}

func TestHTTPServerDownThenUp(t *testing.T) {
	addr := freeAddr(t)
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"late": {URL: "http://" + addr + "/mcp?key=SECRETKEY", Headers: map[string]string{"Authorization": "Bearer t"}},
	}}, log)
	defer closeManager(t, m)
	ctx := context.Background()

	tools, err := m.Tools(ctx)
	if err != nil || len(tools) != 0 {
		t.Fatalf("Tools = %v, %v; want none", toolNames(tools), err)
	}
	st := statusOf(m, "late")
	if st.Connected || !strings.Contains(st.Error, "connection refused") || st.Transport != "http" {
		t.Errorf("status = %+v", st)
	}
	if strings.Contains(st.Error, "SECRETKEY") {
		t.Errorf("status shows the URL's key: %s", st.Error)
	}
	start := time.Now()
	_, err = m.Call(ctx, "late", "add", map[string]any{"a": 1, "b": 2})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Call error = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Call to a refusing server took %v", d)
	}
	mustContain(t, err.Error(), "connection refused")
	if strings.Contains(err.Error(), "SECRETKEY") {
		t.Errorf("error shows the URL's key: %v", err)
	}

	ts := newTestServer("t")
	hs := serveAt(t, ts, addr)
	res, err := m.Call(ctx, "late", "add", map[string]any{"a": 1, "b": 2})
	if err != nil || res.Text != `{"sum":3}` {
		t.Fatalf("add after the server came up = %#v, %v", res, err)
	}
	if st := statusOf(m, "late"); !st.Connected || st.Error != "" {
		t.Errorf("status = %+v", st)
	}

	// Down again: the session breaks, reconnecting fails.
	ts.shutdown(hs)
	if _, err := m.Call(ctx, "late", "add", map[string]any{"a": 1, "b": 2}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Call with the server gone: %v, want ErrUnavailable", err)
	}
	if st := statusOf(m, "late"); st.Connected || st.Error == "" {
		t.Errorf("status with the server gone = %+v", st)
	}
	// A new server process (new sessions) on the same address.
	serveAt(t, newTestServer("t"), addr)
	if res, err := m.Call(ctx, "late", "add", map[string]any{"a": 2, "b": 2}); err != nil || res.Text != `{"sum":4}` {
		t.Fatalf("add after the restart = %#v, %v", res, err)
	}
	tools, err = m.Tools(ctx)
	if err != nil || len(tools) != 4 {
		t.Errorf("Tools after the restart = %v, %v", toolNames(tools), err)
	}
}

// A restart the client does not see coming: the next call meets a server
// that has never heard of its session.
func TestHTTPServerRestartedBetweenCalls(t *testing.T) {
	addr := freeAddr(t)
	ts := newTestServer("t")
	hs := serveAt(t, ts, addr)
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"s": {URL: "http://" + addr, Headers: map[string]string{"Authorization": "Bearer t"}},
	}}, log)
	defer closeManager(t, m)
	ctx := context.Background()
	if _, err := m.Call(ctx, "s", "add", map[string]any{"a": 1, "b": 2}); err != nil {
		t.Fatal(err)
	}
	ts.shutdown(hs)
	serveAt(t, newTestServer("t"), addr)
	if res, err := m.Call(ctx, "s", "add", map[string]any{"a": 5, "b": 5}); err != nil || res.Text != `{"sum":10}` {
		t.Fatalf("add after the restart = %#v, %v", res, err)
	}
}

func TestInvalidServerInManager(t *testing.T) {
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"Bad-Name": {URL: "http://127.0.0.1:1"},
		"both":     {URL: "http://127.0.0.1:1", Command: "true"},
	}}, log)
	defer closeManager(t, m)
	tools, err := m.Tools(context.Background())
	if err != nil || len(tools) != 0 {
		t.Fatalf("Tools = %v, %v", tools, err)
	}
	for _, st := range m.Status() {
		if st.Connected || !strings.Contains(st.Error, "invalid configuration") {
			t.Errorf("status = %+v", st)
		}
	}
	if _, err := m.Call(context.Background(), "both", "x", nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Call error = %v, want ErrUnavailable", err)
	}
}

func TestClosedManager(t *testing.T) {
	ts := newTestServer("t")
	hs := ts.start(t)
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"s": {URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer t"}},
	}}, log)
	ctx := context.Background()
	if _, err := m.Call(ctx, "s", "add", map[string]any{"a": 1, "b": 2}); err != nil {
		t.Fatal(err)
	}
	// A call under way when the manager closes ends with it.
	errc := make(chan error, 1)
	go func() {
		_, err := m.Call(ctx, "s", "slow", map[string]any{"seconds": 20})
		errc <- err
	}()
	// Under way: the server runs it.
	for deadline := time.Now().Add(10 * time.Second); ts.slowing.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow call did not reach the server within 10 s")
		}
	}
	start := time.Now()
	closeManager(t, m)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := <-errc; !errors.Is(err, ErrUnavailable) {
		t.Errorf("call under way at Close: %v, want ErrUnavailable", err)
	}
	if _, err := m.Call(ctx, "s", "add", map[string]any{"a": 1, "b": 2}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Call after Close: %v, want ErrUnavailable", err)
	}
	if st := statusOf(m, "s"); st.Connected {
		t.Errorf("status after Close = %+v", st)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A server that accepts connections and never answers must not hold up
// the others' tools longer than its call timeout.
func TestHTTPHangingServer(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	ts := newTestServer("t")
	hs := ts.start(t)
	log, _ := newLog()
	m := NewManager(Config{Servers: map[string]ServerConfig{
		"good": {URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer t"}},
		"hung": {URL: hang.URL, CallTimeout: Duration(300 * time.Millisecond)},
	}}, log)
	defer closeManager(t, m)
	ctx := context.Background()
	start := time.Now()
	tools, err := m.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Tools took %v", d)
	}
	if len(tools) != 4 || tools[0].Server != "good" {
		t.Errorf("tools = %v", toolNames(tools))
	}
	if st := statusOf(m, "hung"); st.Connected || st.Error != "connecting" {
		t.Errorf("status = %+v", st)
	}
	start = time.Now()
	if _, err := m.Call(ctx, "hung", "add", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Call error = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Call took %v", d)
	}
}
