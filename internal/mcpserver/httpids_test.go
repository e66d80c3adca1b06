package mcpserver_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/probe"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/service"
)

const initParams = `"params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`

func httpServers(t *testing.T, stateless bool) (streamable, sse http.Handler, url string) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 1
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	streamable, sse = mcpserver.HTTPHandlers(svc, mcpserver.Options{Config: cfg}, stateless)
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamable)
	mux.Handle("/mcp/sse", sse)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return streamable, sse, srv.URL
}

// idOf is the raw id of the first message of an SSE or JSON answer.
func idOf(t *testing.T, body string) string {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			body = data
			break
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("not a JSON-RPC answer: %q", body)
	}
	return string(m["id"])
}

// A stateless handler (a cluster replica's) serves each POST alone, with
// no initialize: ids still come back exactly, and it keeps no id map.
func TestStatelessHTTPIDsRoundTrip(t *testing.T) {
	streamable, _, url := httpServers(t, true)
	for _, id := range []string{"1180591620717411303424", "9007199254740993", "-9223372036854775809", "1.5", "1e2", "-0", `"a\u0062c"`} {
		resp, body := probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`, map[string]string{"Mcp-Protocol-Version": "2025-06-18"})
		if got := idOf(t, body); got != id || !strings.Contains(body, "execute_code") {
			t.Errorf("stateless tools/list with id %s: %d, id %s, %.200s", id, resp.StatusCode, got, body)
		}
	}
	if n := mcpserver.IDMapsHeld(streamable); n != 0 {
		t.Errorf("%d id maps held after the POSTs ended", n)
	}
}

// notifications/cancelled names the call by the client's id: the call
// with id 2^70 is ended (its run's sandbox stops sleeping, judged from
// /proc), and the session's id map is freed once its POSTs end.
func TestHTTPCancelByClientID(t *testing.T) {
	streamable, _, url := httpServers(t, false)
	resp, _ := probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","id":"i","method":"initialize",`+initParams+`}`, nil)
	sid := resp.Header.Get("Mcp-Session-Id")
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h)
	done := make(chan string, 1)
	go func() {
		_, body := probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","id":1180591620717411303424,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"import time\ntime.sleep(60)","timeout":60}}}`, h)
		done <- body
	}()
	waitSleeping := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); sleepingSandboxes(t) < n; time.Sleep(25 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d runs sleeping 30 s after the calls, want %d (the check would prove nothing)", sleepingSandboxes(t), n)
			}
		}
	}
	waitSleeping(1)
	// A second call, whose cancellation comes after the one below.
	other := make(chan string, 1)
	go func() {
		_, body := probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","id":"other","method":"tools/call","params":{"name":"execute_code","arguments":{"code":"import time\ntime.sleep(60)","timeout":60}}}`, h)
		other <- body
	}()
	waitSleeping(2)
	// An id nothing was sent with cancels nothing (before the mapping, 1
	// could have named another call's token). Judged once the other call,
	// canceled after it, has ended: had it ended the first call, that one
	// would have ended by then too.
	probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, h)
	probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"other"}}`, h)
	select {
	case <-other:
	case <-time.After(20 * time.Second):
		t.Fatal("the other call's POST did not end 20 s after its cancellation")
	}
	for deadline := time.Now().Add(10 * time.Second); sleepingSandboxes(t) > 1; time.Sleep(25 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("10 s after notifications/cancelled, the other run still sleeps")
		}
	}
	select {
	case body := <-done:
		t.Fatalf("a cancellation of an id never sent ended the call: %q", body)
	default:
	}
	if sleepingSandboxes(t) == 0 {
		t.Fatal("a cancellation of an id never sent ended the call")
	}
	probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1180591620717411303424}}`, h)
	deadline := time.Now().Add(10 * time.Second)
	for sleepingSandboxes(t) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("10 s after notifications/cancelled, the run still sleeps")
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case body := <-done:
		if body != "" && idOf(t, body) != "1180591620717411303424" {
			t.Errorf("the canceled call's POST: %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the canceled call's POST did not end")
	}
	if n := mcpserver.IDMapsHeld(streamable); n != 0 {
		t.Errorf("%d id maps held after the session's POSTs ended", n)
	}
}

// A legacy SSE stream holds at most MaxOutstandingIDs unanswered calls:
// the next is refused with -32600 until one is answered; the stream's map
// is freed when it ends.
func TestSSEOutstandingIDsCapped(t *testing.T) {
	defer mcpserver.SetMaxOutstandingIDs(2)()
	_, sse, url := httpServers(t, false)
	req, _ := http.NewRequest("GET", url+"/mcp/sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	var endpoint string
	msgs := make(chan string, 16)
	for endpoint == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			endpoint = url + data
		}
	}
	go func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				close(msgs)
				return
			}
			if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
				msgs <- data
			}
		}
	}()
	next := func() string {
		select {
		case m := <-msgs:
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no message on the stream within 30 s")
		}
		return ""
	}
	probe.PostMCP(t, endpoint, `{"jsonrpc":"2.0","id":0,"method":"initialize",`+initParams+`}`, nil)
	next()
	probe.PostMCP(t, endpoint, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	call := `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"import time\ntime.sleep(1)"}}}`
	for _, id := range []string{"1.5", "2.5"} {
		if r, body := probe.PostMCP(t, endpoint, strings.Replace(call, "%s", id, 1), nil); r.StatusCode != http.StatusAccepted {
			t.Fatalf("call %s: %d %q", id, r.StatusCode, body)
		}
	}
	r, body := probe.PostMCP(t, endpoint, strings.Replace(call, "%s", "3.5", 1), nil)
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"code":-32600`) || !strings.Contains(body, `"id":3.5`) || !strings.Contains(body, "await their answers") {
		t.Errorf("a third call over the cap of 2: %d %q", r.StatusCode, body)
	}
	for range 2 {
		if id := idOf(t, next()); id != "1.5" && id != "2.5" {
			t.Errorf("an answer with id %s", id)
		}
	}
	if r, body := probe.PostMCP(t, endpoint, strings.Replace(call, "%s", "4.5", 1), nil); r.StatusCode != http.StatusAccepted {
		t.Errorf("a call once the others were answered: %d %q", r.StatusCode, body)
	}
	if id := idOf(t, next()); id != "4.5" {
		t.Errorf("an answer with id %s", id)
	}
	if n := mcpserver.IDMapsHeld(sse); n != 1 {
		t.Errorf("an open SSE stream: %d id maps held, want 1", n)
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for mcpserver.IDMapsHeld(sse) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the stream ended, %d id maps held", mcpserver.IDMapsHeld(sse))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
