package e2b_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/probe"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/service"
)

// A runCode whose client stops reading ends at its limit, and the next
// runCode on the same sandbox runs (it used to wait for the slow client);
// the stalled connection is closed after the per-write deadline (issue
// 24, item 2).
func TestStalledRunCodeDoesNotBlockTheSandbox(t *testing.T) {
	const limit = 2 * time.Second
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.SessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	cfg.MaxTimeout = limit // runCode's limit: min(60 s, this)
	cfg.StreamWriteTimeout = time.Second
	// Output larger than the kernel's socket buffers, so that the server's
	// writes block once what it streamed has gone out.
	cfg.OutputSize, cfg.MaxOutput = 8<<20, 8<<20
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	keys, _ := access.ParseKeys("alice:" + aliceKey)
	srv := newHTTPServer(t, e2b.New(svc, e2b.Options{Keys: keys, Config: cfg}))
	status, created := call(t, "POST", srv+"/v2/sandboxes", `{"timeout": 120}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 {
		t.Fatalf("create: %d %v", status, created)
	}
	id, token := created["sandboxID"].(string), created["envdAccessToken"].(string)
	hdr := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49999", "X-Access-Token": token}

	// 3,000,000 lines (under the output limit), hundreds of MB as NDJSON.
	code := "import sys, time\nsys.stdout.write('\\n' * 3000000)\nsys.stdout.flush()\ntime.sleep(1000)\n"
	body, _ := json.Marshal(map[string]any{"code": code})
	host := strings.TrimPrefix(srv, "http://")
	var req strings.Builder
	fmt.Fprintf(&req, "POST /execute HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", host, len(body))
	for k, v := range hdr {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n" + string(body))
	opened := time.Now()
	stalled := probe.DialStalled(t, host, req.String())

	// The next runCode, once the first has started, on the same sandbox.
	deadline := time.Now().Add(10 * time.Second)
	for svc.Running() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first runCode never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	started := time.Now()
	client := &http.Client{Timeout: limit + 10*time.Second}
	r, _ := http.NewRequest("POST", srv+"/execute", strings.NewReader(`{"code": "print('second')"}`))
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(r)
	if err != nil {
		t.Fatalf("the next runCode on the sandbox: %v (after %v)", err, time.Since(opened).Round(time.Millisecond))
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(started)
	t.Logf("the next runCode answered %v after the stalled one was sent, %v after it started (its limit %v)", time.Since(opened).Round(time.Millisecond), took.Round(time.Millisecond), limit)
	if resp.StatusCode != 200 || !strings.Contains(string(out), `"text":"second\n"`) || !strings.Contains(string(out), "end_of_execution") {
		t.Fatalf("the next runCode: %d %.300s", resp.StatusCode, out)
	}
	// What is tested is that the stalled client does not hold the sandbox
	// (before: until it left); counted from the stalled run's start, with
	// room for a loaded 2-core host to kill it and gather its output.
	if took > limit+8*time.Second {
		t.Errorf("the next runCode waited %v for a run limited to %v", took, limit)
	}
	// The stalled connection: closed once the write deadline passed (judged
	// once the server has let go of its socket, seen from the host).
	probe.WaitLetGo(t, stalled, 30*time.Second)
	_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, stalled)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the stalled runCode's connection is still open (%d bytes read)", n)
	}
}

// A process stream (commands.run) whose client stops reading is closed
// after the per-write deadline; the process is not held by it.
func TestStalledProcessStreamIsClosed(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.SessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	cfg.StreamWriteTimeout = time.Second
	cfg.OutputSize, cfg.MaxOutput = 8<<20, 8<<20 // more than the socket buffers hold
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	keys, _ := access.ParseKeys("alice:" + aliceKey)
	srv := newHTTPServer(t, e2b.New(svc, e2b.Options{Keys: keys, Config: cfg}))
	status, created := call(t, "POST", srv+"/v2/sandboxes", `{"timeout": 120}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 {
		t.Fatalf("create: %d %v", status, created)
	}
	id, token := created["sandboxID"].(string), created["envdAccessToken"].(string)
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "python3", "args": []string{"-c", "import sys; sys.stdout.write('x' * 7000000)"}}})
	body := append([]byte{0, byte(len(msg) >> 24), byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
	host := strings.TrimPrefix(srv, "http://")
	req := fmt.Sprintf("POST /process.Process/Start HTTP/1.1\r\nHost: %s\r\nContent-Type: application/connect+json\r\nConnect-Protocol-Version: 1\r\n"+
		"E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 49983\r\nX-Access-Token: %s\r\nContent-Length: %d\r\n\r\n%s", host, id, token, len(body), body)
	stalled := probe.DialStalled(t, host, req)
	// The command is quick; its 9 MB of events wait for the client, which
	// never reads: the write deadline (1 s) ends the stream (judged once
	// the server has let go of its socket, seen from the host).
	probe.WaitLetGo(t, stalled, 30*time.Second)
	_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, stalled)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the stalled process stream's connection is still open (%d bytes read)", n)
	}
	t.Logf("the stalled process stream: %d bytes, then %v", n, err)
}

// newHTTPServer serves h on loopback with net/http's defaults (no write
// timeout: a stream's case).
func newHTTPServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}
