package cli

import (
	"bufio"
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/probe"
)

// hostileIDs are ids the SDK would change (it decodes numbers through
// float64) and an escaped string it would re-encode.
var hostileIDs = []string{
	"1180591620717411303424", // 2^70
	"9007199254740993",       // 2^53+1
	"-9223372036854775809",   // -2^63-1
	"1.5", "1e2", "-0",
	`"a\u0062c\/"`,
}

const initializeParams = `"params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`

// answersOf reads a streamable POST's answers, as SSE events or a JSON
// body (one message or a batch), each message as its raw bytes.
func answersOf(t *testing.T, resp *http.Response, body string) (mode string, msgs []string) {
	t.Helper()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		for _, line := range strings.Split(body, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok && strings.HasPrefix(data, "{") {
				msgs = append(msgs, data)
			}
		}
	case "application/json":
		if strings.HasPrefix(strings.TrimSpace(body), "[") {
			var batch []json.RawMessage
			if err := json.Unmarshal([]byte(body), &batch); err != nil {
				t.Fatalf("a JSON batch answer that does not parse: %q", body)
			}
			for _, m := range batch {
				msgs = append(msgs, string(m))
			}
		} else {
			msgs = append(msgs, strings.TrimSpace(body))
		}
	default:
		t.Fatalf("answer of type %q (%d): %.300s", mt, resp.StatusCode, body)
	}
	return mt, msgs
}

// rawField is one member of a JSON object, as its raw bytes.
func rawField(t *testing.T, msg, name string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(msg), &m); err != nil {
		t.Fatalf("not a JSON object: %q", msg)
	}
	return string(m[name])
}

// Item 17 of issue 24 over HTTP: ids come back byte for byte on
// streamable HTTP (the server is stateful: calls are answered as SSE
// events of the POST; protocol-level errors as a JSON body) and on legacy
// SSE (answers on the GET stream), and a call before initialize on legacy
// SSE gets a JSON-RPC code. Before: such ids were refused with -32600
// (earlier still, changed), and the pre-initialize error had code 0.
func TestMCPHTTPIDsRoundTripExactly(t *testing.T) {
	s := startServe(t)

	// Streamable HTTP: initialize itself with 2^70.
	resp, body := probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","id":1180591620717411303424,"method":"initialize",`+initializeParams+`}`, nil)
	sid := resp.Header.Get("Mcp-Session-Id")
	if _, msgs := answersOf(t, resp, body); sid == "" || len(msgs) != 1 || rawField(t, msgs[0], "id") != "1180591620717411303424" {
		t.Fatalf("initialize with id 2^70: %d session %q %.300s", resp.StatusCode, sid, body)
	}
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h)
	for _, id := range hostileIDs {
		resp, body := probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`, h)
		mode, msgs := answersOf(t, resp, body)
		if mode != "text/event-stream" || len(msgs) != 1 || rawField(t, msgs[0], "id") != id || rawField(t, msgs[0], "result") == "" {
			t.Errorf("/mcp tools/list with id %s: %d %s %.300s", id, resp.StatusCode, mode, body)
		}
	}
	// A tool call's result, run in a sandbox, goes back under its id.
	resp, body = probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"print(6*7)"}}}`, h)
	if _, msgs := answersOf(t, resp, body); len(msgs) != 1 || rawField(t, msgs[0], "id") != "9007199254740993" || !strings.Contains(msgs[0], "42") {
		t.Errorf("/mcp tools/call with id 2^53+1: %d %.500s", resp.StatusCode, body)
	}
	// The JSON answers: the SDK refuses a call of a protocol version this
	// stateful server does not serve with a JSON body.
	for _, id := range hostileIDs {
		hv := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2026-07-28"}
		resp, body := probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`, hv)
		mode, msgs := answersOf(t, resp, body)
		if mode != "application/json" || len(msgs) != 1 || rawField(t, msgs[0], "id") != id || rawField(t, msgs[0], "error") == "" {
			t.Errorf("/mcp JSON answer with id %s: %d %s %.300s", id, resp.StatusCode, mode, body)
		}
	}

	// Legacy SSE: answers come on the GET stream.
	stream := openLegacySSE(t, s.url)
	resp, _ = probe.PostMCP(t, stream.endpoint, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST to the SSE endpoint: %d", resp.StatusCode)
	}
	if msg := stream.next(t); rawField(t, msg, "id") != "7" || !strings.Contains(rawField(t, msg, "error"), `"code":-32600`) {
		t.Errorf("a call before initialize on /mcp/sse: %.300s, want error code -32600", msg)
	}
	probe.PostMCP(t, stream.endpoint, `{"jsonrpc":"2.0","id":-0,"method":"initialize",`+initializeParams+`}`, nil)
	if msg := stream.next(t); rawField(t, msg, "id") != "-0" || rawField(t, msg, "result") == "" {
		t.Fatalf("initialize on /mcp/sse with id -0: %.300s", msg)
	}
	probe.PostMCP(t, stream.endpoint, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	for _, id := range hostileIDs {
		probe.PostMCP(t, stream.endpoint, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`, nil)
		if msg := stream.next(t); rawField(t, msg, "id") != id || rawField(t, msg, "result") == "" {
			t.Errorf("/mcp/sse tools/list with id %s: %.300s", id, msg)
		}
	}
}

// legacySSE is an open GET /mcp/sse stream, read event by event.
type legacySSE struct {
	endpoint string
	msgs     chan string
}

func openLegacySSE(t *testing.T, base string) *legacySSE {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/mcp/sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	l := &legacySSE{msgs: make(chan string, 64)}
	br := bufio.NewReader(resp.Body)
	for l.endpoint == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the SSE stream ended before its endpoint: %v", err)
		}
		if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok && strings.Contains(data, "sessionid=") {
			l.endpoint = base + data
		}
	}
	go func() {
		defer close(l.msgs)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: "); ok {
				l.msgs <- data
			}
		}
	}()
	return l
}

// next is the stream's next message, within 10 s.
func (l *legacySSE) next(t *testing.T) string {
	t.Helper()
	select {
	case m, ok := <-l.msgs:
		if !ok {
			t.Fatal("the SSE stream ended")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the SSE stream within 10 s")
	}
	return ""
}
