package cli

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/pgtest"
)

// TestReplicasServeAnyE2BSandbox: two replicas, one PostgreSQL, each with
// its E2B listener, and no sticky routing. A process and a code context
// started through one replica are reached through the other: the process
// is listed there, takes its input there and is followed there to its
// end; the context is listed there and keeps its variables for a run
// there, whose execution count goes on from the first replica's.
func TestReplicasServeAnyE2BSandbox(t *testing.T) {
	pg := pgtest.Start(t)
	_, e2bAddr := startE2BReplicas(t, pg.DSN())
	created := createE2BSandbox(t, "http://"+e2bAddr[0], aliceKey, 120)
	box := e2bBox{t: t, id: created["sandboxID"].(string), token: created["envdAccessToken"].(string)}

	// A process waiting for a line, started through replica 0: its start
	// stream is left at its start event.
	start := box.stream(e2bAddr[0], "/process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/bin/bash",
		"args": []string{"-l", "-c", "echo ready; read line; echo got $line"}}, "tag": "waiter", "stdin": true})
	defer start.Close()
	if ev := start.next(); ev.Event.Start == nil {
		t.Fatalf("the start stream began with %+v", ev)
	}
	// Through replica 1: listed, connected to by its tag, given its input.
	code, out := box.unary(e2bAddr[1], "/process.Process/List", map[string]any{})
	if code != 200 || !strings.Contains(out, `"tag":"waiter"`) {
		t.Fatalf("list through replica 1: %d %s", code, out)
	}
	follow := box.stream(e2bAddr[1], "/process.Process/Connect", map[string]any{"process": map[string]any{"tag": "waiter"}})
	defer follow.Close()
	if ev := follow.next(); ev.Event.Start == nil {
		t.Fatalf("the connect stream began with %+v", ev)
	}
	if code, out := box.unary(e2bAddr[1], "/process.Process/SendInput", map[string]any{"process": map[string]any{"tag": "waiter"},
		"input": map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte("from replica 1\n"))}}); code != 200 {
		t.Fatalf("input through replica 1: %d %s", code, out)
	}
	var stdout strings.Builder
	for {
		ev := follow.next()
		if ev.Event.Data != nil {
			b, _ := base64.StdEncoding.DecodeString(ev.Event.Data.Stdout)
			stdout.Write(b)
		}
		if ev.Event.End != nil {
			if ev.Event.End.ExitCode != 0 || !strings.Contains(stdout.String(), "got from replica 1") {
				t.Fatalf("followed through replica 1: exit %d, stdout %q", ev.Event.End.ExitCode, stdout.String())
			}
			break
		}
	}

	// A context made through replica 0, with a variable set there.
	code, out = box.daemon(e2bAddr[0], "POST", "/contexts", `{"language": "python", "cwd": "/tmp"}`)
	var made struct{ ID, Cwd string }
	if code != 200 || json.Unmarshal([]byte(out), &made) != nil || made.Cwd != "/tmp" {
		t.Fatalf("create a context through replica 0: %d %s", code, out)
	}
	code, out = box.daemon(e2bAddr[0], "POST", "/execute", `{"code": "x = 41", "context_id": "`+made.ID+`"}`)
	runs := executionCount(out)
	if code != 200 || runs < 1 || strings.Contains(out, `"type":"error"`) {
		t.Fatalf("run in it through replica 0: %d %s", code, out)
	}
	code, out = box.daemon(e2bAddr[1], "GET", "/contexts", "")
	if code != 200 || !strings.Contains(out, made.ID) {
		t.Fatalf("list contexts through replica 1: %d %s", code, out)
	}
	code, out = box.daemon(e2bAddr[1], "POST", "/execute", `{"code": "x + 1", "context_id": "`+made.ID+`"}`)
	if code != 200 || !strings.Contains(out, `"text":"42"`) || executionCount(out) != runs+1 {
		t.Fatalf("run in it through replica 1: %d %s", code, out)
	}
}

// e2bBox is an E2B sandbox as a test reaches its daemons.
type e2bBox struct {
	t         *testing.T
	id, token string
}

func (b e2bBox) request(addr, method, path, port, contentType string, body io.Reader) *http.Response {
	b.t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, body)
	req.Header.Set("E2b-Sandbox-Id", b.id)
	req.Header.Set("E2b-Sandbox-Port", port)
	req.Header.Set("X-Access-Token", b.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Connect-Protocol-Version", "1")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// daemon calls the code interpreter (port 49999).
func (b e2bBox) daemon(addr, method, path, body string) (int, string) {
	b.t.Helper()
	resp := b.request(addr, method, path, "49999", "application/json", strings.NewReader(body))
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// unary calls a Connect RPC of envd (port 49983) with JSON.
func (b e2bBox) unary(addr, path string, msg any) (int, string) {
	b.t.Helper()
	raw, _ := json.Marshal(msg)
	resp := b.request(addr, "POST", path, "49983", "application/json", bytes.NewReader(raw))
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// connectEvent is a process event of envd's streams.
type connectEvent struct {
	Event struct {
		Start *struct{ PID int } `json:"start"`
		Data  *struct{ Stdout string }
		End   *struct {
			ExitCode int `json:"exitCode"`
		} `json:"end"`
	} `json:"event"`
}

// eventStream reads a Connect server stream's messages one at a time.
type eventStream struct {
	t    *testing.T
	body io.ReadCloser
	r    *bufio.Reader
}

func (b e2bBox) stream(addr, path string, msg any) *eventStream {
	b.t.Helper()
	raw, _ := json.Marshal(msg)
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(raw)))
	resp := b.request(addr, "POST", path, "49983", "application/connect+json", bytes.NewReader(append(frame, raw...)))
	if resp.StatusCode != 200 {
		out, _ := io.ReadAll(resp.Body)
		b.t.Fatalf("%s through %s: %d %s", path, addr, resp.StatusCode, out)
	}
	return &eventStream{t: b.t, body: resp.Body, r: bufio.NewReader(resp.Body)}
}

// next is the next event, keepalives skipped; the stream's end fails.
func (s *eventStream) next() connectEvent {
	s.t.Helper()
	for {
		head := make([]byte, 5)
		if _, err := io.ReadFull(s.r, head); err != nil {
			s.t.Fatalf("the stream ended: %v", err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(s.r, msg); err != nil {
			s.t.Fatalf("the stream broke: %v", err)
		}
		if head[0]&2 != 0 {
			s.t.Fatalf("the stream ended: %s", msg)
		}
		var ev connectEvent
		if err := json.Unmarshal(msg, &ev); err != nil {
			s.t.Fatalf("event %s: %v", msg, err)
		}
		if ev.Event.Start != nil || ev.Event.Data != nil || ev.Event.End != nil {
			return ev
		}
	}
}

func (s *eventStream) Close() error { return s.body.Close() }

// executionCount is the number_of_executions line of an /execute answer.
func executionCount(ndjson string) int {
	for line := range strings.Lines(ndjson) {
		var l struct {
			Type  string
			Count int `json:"execution_count"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Type == "number_of_executions" {
			return l.Count
		}
	}
	return -1
}
