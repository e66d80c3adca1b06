package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stdioPeer is `codecage mcp` as a real process, spoken to frame by frame.
type stdioPeer struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startStdioPeer(t *testing.T) *stdioPeer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "mcp", "--pool-size", "1", "--state-dir", t.TempDir())
	cmd.Env = append(os.Environ(), cliMainEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return &stdioPeer{t: t, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
}

func (p *stdioPeer) send(frame string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, frame+"\n"); err != nil {
		p.t.Fatalf("writing a frame: %v (the server is gone?)", err)
	}
}

// answer reads the next frame, within 10 s.
func (p *stdioPeer) answer() (raw string, msg map[string]json.RawMessage) {
	p.t.Helper()
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() { s, err := p.out.ReadString('\n'); ch <- line{s, err} }()
	select {
	case l := <-ch:
		if l.err != nil {
			p.t.Fatalf("reading an answer: %v (alive: %v)", l.err, p.alive())
		}
		if err := json.Unmarshal([]byte(l.s), &msg); err != nil {
			p.t.Fatalf("answer is not JSON: %q", l.s)
		}
		return strings.TrimSuffix(l.s, "\n"), msg
	case <-time.After(10 * time.Second):
		p.t.Fatalf("no answer within 10s (alive: %v)", p.alive())
	}
	return "", nil
}

// alive asks the kernel, not the pipe, whether the process still runs.
func (p *stdioPeer) alive() bool {
	return p.cmd.ProcessState == nil && syscall.Kill(p.cmd.Process.Pid, 0) == nil
}

func errorCode(t *testing.T, msg map[string]json.RawMessage) int {
	t.Helper()
	var e struct {
		Code int `json:"code"`
	}
	if msg["error"] == nil || json.Unmarshal(msg["error"], &e) != nil {
		t.Fatalf("not an error answer: %v", msg)
	}
	return e.Code
}

// Item 10 of issue 24: each malformed frame gets a JSON-RPC error and the
// stdio server goes on (before: the first one ended it with exit 3).
func TestMCPStdioSurvivesMalformedFrames(t *testing.T) {
	p := startStdioPeer(t)
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	cases := []struct {
		name, frame string
		code        int
		id          string
	}{
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, -32600, "null"},
		{"two values", `}{`, -32700, "null"},
		{"binary", "\x00\xff\xfe\x01", -32700, "null"},
		{"no jsonrpc", `{"id":2,"method":"ping"}`, -32600, "2"},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, "null"},
		{"deep nesting", deep, -32600, "null"},
		{"truncated", `{"jsonrpc":"2.0","id":3,"method":"pi`, -32700, "null"},
		{"number", `42`, -32600, "null"},
		{"method not a string", `{"jsonrpc":"2.0","id":4,"method":7}`, -32600, "4"},
		{"over-long line", `{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"` + strings.Repeat("a", 17<<20) + `"}}`, -32700, "null"},
	}
	for _, c := range cases {
		p.send(c.frame)
		_, msg := p.answer()
		if got := errorCode(t, msg); got != c.code {
			t.Errorf("%s: code %d, want %d", c.name, got, c.code)
		}
		if string(msg["id"]) != c.id {
			t.Errorf("%s: id %s, want %s", c.name, msg["id"], c.id)
		}
		if !p.alive() {
			t.Fatalf("%s ended the server", c.name)
		}
	}
	// The session goes on: initialize, list the tools.
	p.send(`{"jsonrpc":"2.0","id":10,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, msg := p.answer(); msg["result"] == nil {
		t.Fatalf("initialize after malformed frames: %v", msg)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	p.send(`{"jsonrpc":"2.0","id":11,"method":"tools/list"}`)
	if raw, msg := p.answer(); msg["result"] == nil || !strings.Contains(raw, "execute_code") {
		t.Fatalf("tools/list after malformed frames: %.300s", raw)
	}
}

// Item 17 of issue 24: ids come back exactly as sent, and a call before
// initialize gets a JSON-RPC code (the SDK gave 0).
func TestMCPStdioIDsRoundTripExactly(t *testing.T) {
	p := startStdioPeer(t)
	p.send(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
	_, msg := p.answer()
	if code := errorCode(t, msg); code != -32600 {
		t.Errorf("a call before initialize: code %d, want -32600", code)
	}
	p.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if raw, _ := p.answer(); !strings.HasPrefix(raw, `{"jsonrpc":"2.0","id":"init","result":`) {
		t.Fatalf("initialize: %.200s", raw)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, id := range []string{
		"1180591620717411303424", // 2^70
		"9007199254740993",       // 2^53+1
		"-9223372036854775809",   // below int64
		"1.5", "1e2", "-0", "0", `"a\u0062c"`, `""`, "123456789012345678901234567890.000001",
	} {
		p.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list"}`)
		raw, msg := p.answer()
		if string(msg["id"]) != id || msg["result"] == nil {
			t.Errorf("id %s came back as %s (%.120s)", id, msg["id"], raw)
		}
	}
	// Two calls in flight with the same id are both answered with it.
	p.send(`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`)
	p.send(`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`)
	for range 2 {
		if _, msg := p.answer(); string(msg["id"]) != "1.5" {
			t.Errorf("duplicate id answered as %s", msg["id"])
		}
	}
}
