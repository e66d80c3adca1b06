package e2b_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// streamDuringKill sends req, kills b's sandbox once the answer's headers
// are in, and returns what the body held and how reading it ended.
func streamDuringKill(t *testing.T, b *box, req *http.Request) (string, error) {
	t.Helper()
	req.Header.Set("E2b-Sandbox-Id", b.id)
	req.Header.Set("X-Access-Token", b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", req.URL.Path, resp.StatusCode, raw)
	}
	time.AfterFunc(500*time.Millisecond, func() {
		call(t, "DELETE", b.srv.URL+"/sandboxes/"+b.id, "", map[string]string{"X-API-KEY": aliceKey})
	})
	done := make(chan struct{})
	var raw []byte
	go func() {
		defer close(done)
		raw, err = io.ReadAll(resp.Body)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the answer went on after the sandbox was killed")
	}
	return string(raw), err
}

// A sandbox killed during runCode: the stream breaks, as a VM's does, so
// that the SDKs raise their "sandbox was killed" TimeoutError; it does not
// end with an in-band error (one naming an MCP tool, restart_session).
func TestKillDuringRunCodeBreaksTheStream(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	req, _ := http.NewRequest("POST", srv.URL+"/execute", strings.NewReader(`{"code": "import time\nprint('started', flush=True)\ntime.sleep(30)"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("E2b-Sandbox-Port", "49999")
	body, err := streamDuringKill(t, b, req)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the answer ended cleanly (%v): %s", err, body)
	}
	if strings.Contains(body, "end_of_execution") || strings.Contains(body, "restart_session") || strings.Contains(body, `"type":"error"`) {
		t.Fatalf("an in-band end: %s", body)
	}
}

// A command running when its sandbox is killed: its stream breaks too,
// with no end event (which the SDK would report as CommandExitError -1).
func TestKillDuringCommandBreaksTheStream(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"templateID": "base", "timeout": 60}`)
	msg := `{"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo started; python3 -c 'import time; time.sleep(30)'"]}}`
	req, _ := http.NewRequest("POST", srv.URL+"/process.Process/Start", bytes.NewReader(envelope(0, []byte(msg))))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("E2b-Sandbox-Port", "49983")
	body, err := streamDuringKill(t, b, req)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the stream ended cleanly (%v): %q", err, body)
	}
	if !strings.Contains(body, "start") || strings.Contains(body, `"end"`) {
		t.Fatalf("want a start and no end: %q", body)
	}
}
