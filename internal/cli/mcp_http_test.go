package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/probe"
)

// Item 3 of issue 24: a legacy SSE client that stops reading is dropped
// once its unsent results pass the budget; before, every finished call's
// 1 MB result waited in the server (a goroutine each) until the client
// left. Judged from the host: the session is gone (404) while the client's
// socket is still open, and the server's goroutines are back to baseline.
func TestMCPSSEStalledClientIsDropped(t *testing.T) {
	s := startServe(t)
	base := probe.Metric(t, s.url, "go_goroutines")
	host := strings.TrimPrefix(s.url, "http://")
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /mcp/sse HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", host)
	br := bufio.NewReader(conn)
	var endpoint string
	for endpoint == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, "sessionid=") {
			endpoint = s.url + strings.TrimSpace(strings.TrimPrefix(line, "data: "))
		}
	}
	// From here on the client reads nothing.
	probe.PostMCP(t, endpoint, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, nil)
	probe.PostMCP(t, endpoint, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 60; i += 4 {
				req, _ := http.NewRequest("POST", endpoint, strings.NewReader(fmt.Sprintf(
					`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"print('x'*1000000)"}}}`, i+1)))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, _ := probe.PostMCP(t, endpoint, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
		g := probe.Metric(t, s.url, "go_goroutines")
		if resp.StatusCode == http.StatusNotFound && g <= base+5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the calls, a client that stopped reading is still served (POST %d) and the server holds %v goroutines (baseline %v)", resp.StatusCode, g, base)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(s.stderr.String(), "mcp sse: client dropped") {
		t.Errorf("the drop was not logged; stderr:\n%.2000s", s.stderr)
	}
}

// Item 11 of issue 24: DELETE /mcp during a tool call cancels it at once,
// the call's POST gets a JSON-RPC error, and its sandbox is freed (before:
// the DELETE waited for the call, and the POST got an empty 200).
func TestMCPDeleteCancelsCalls(t *testing.T) {
	s := startServe(t)
	resp, _ := probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`, nil)
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("no session id (%d)", resp.StatusCode)
	}
	h := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h)
	type answer struct {
		body string
		at   time.Time
	}
	got := make(chan answer, 1)
	go func() {
		_, body := probe.PostMCP(t, s.url+"/mcp", `{"jsonrpc":"2.0","id":"call-1","method":"tools/call","params":{"name":"execute_code","arguments":{"code":"import time\ntime.sleep(25)"}}}`, h)
		got <- answer{body, time.Now()}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for probe.Metric(t, s.url, "sandbox_pool_in_use") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the call never started")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Into the sleep: the run's process, seen from the host, waits in it.
	for sleepingUnder(s.cmd.Process.Pid) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call's code never reached its sleep")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	req, _ := http.NewRequest("DELETE", s.url+"/mcp", nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	dresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dresp.Body.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("DELETE took %v", took)
	}
	select {
	case a := <-got:
		if !strings.Contains(a.body, `"id":"call-1"`) || !strings.Contains(a.body, `"code":-32004`) {
			t.Errorf("the call's POST got %q, want its JSON-RPC error", a.body)
		}
		if a.at.Sub(start) > 5*time.Second {
			t.Errorf("the call answered %v after the DELETE", a.at.Sub(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call's POST had no answer 10 s after the DELETE")
	}
	// The run's sandbox is given back: the pool has none in use.
	deadline = time.Now().Add(5 * time.Second)
	for probe.Metric(t, s.url, "sandbox_pool_in_use") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the DELETE the run still holds its sandbox (pool in use %v)", probe.Metric(t, s.url, "sandbox_pool_in_use"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sleepingUnder counts the host processes descending from root that wait
// in a sleep (nanosleep, as Python's time.sleep does), read from /proc.
func sleepingUnder(root int) int {
	parent := map[int]int{}
	var sleeping []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := bytes.LastIndexByte(st, ')')
		if err != nil || i < 0 {
			continue
		}
		if f := strings.Fields(string(st[i+1:])); len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
		if w, _ := os.ReadFile("/proc/" + e.Name() + "/wchan"); bytes.Contains(w, []byte("nanosleep")) {
			sleeping = append(sleeping, pid)
		}
	}
	n := 0
	for _, pid := range sleeping {
		for q, hops := parent[pid], 0; q > 0 && hops < 64; q, hops = parent[q], hops+1 {
			if q == root {
				n++
				break
			}
		}
	}
	return n
}
