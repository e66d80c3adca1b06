package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/probe"
)

// openFDs counts a process's open file descriptors, from the host.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// resetCount counts the connections of cs that the other end has closed
// (reset, or ended), judged from their TCP state without reading them.
func resetCount(t *testing.T, cs []net.Conn) int {
	t.Helper()
	n := 0
	for _, c := range cs {
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var info *unix.TCPInfo
		if cerr := rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO) }); cerr != nil || err != nil {
			t.Fatalf("TCP_INFO: %v %v", cerr, err)
		}
		if info.State == unix.BPF_TCP_CLOSE || info.State == unix.BPF_TCP_CLOSE_WAIT {
			n++
		}
	}
	return n
}

// A flood of connections from one client address is held at the caps on
// every listener: the server's descriptors stay bounded (counted in
// /proc/PID/fd), the connections over are refused at once, logged and
// counted, and another client still gets its run.
func TestServeConnectionFloodLeavesRoomForRuns(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "SANDBOX_E2B_LISTEN=127.0.0.1:0", "SANDBOX_STATE_DIR="+filepath.Join(dir, "state"), "SANDBOX_AUDIT_DB="+filepath.Join(dir, "audit.db"),
		"SANDBOX_MAX_CONNECTIONS=40", "SANDBOX_MAX_CONNECTIONS_PER_CLIENT=20")
	if s.e2bURL == "" {
		t.Fatal("serve printed no E2B listener")
	}
	pid := s.cmd.Process.Pid
	// Counted once no sandbox is starting: a pool still filling opens
	// descriptors of its own, which would count as the flood's.
	for deadline := time.Now().Add(60 * time.Second); probe.Metric(t, s.url, "sandbox_pool_creating") > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pools were still filling 60 s after the start")
		}
	}
	before := openFDs(t, pid)
	const flood = 300
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	start := time.Now()
	for _, url := range []string{s.url, s.e2bURL} {
		for range flood {
			if c, err := d.Dial("tcp", hostOf(url)); err == nil {
				held = append(held, c)
			}
		}
	}
	// The server has taken the whole flood once it has reset every
	// connection over the caps (it refuses with a reset, after it counts
	// and before it closes): on a slow or loaded host that takes longer
	// than any fixed wait.
	bound := before + 2*20 + 16
	deadline := time.Now().Add(30 * time.Second)
	for reset := resetCount(t, held); reset < len(held)-2*20; reset = resetCount(t, held) {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the flood the server had reset %d of its %d connections, want all but the 2x20 within the caps", reset, len(held))
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := openFDs(t, pid)
	for ; after > bound && time.Now().Before(deadline); after = openFDs(t, pid) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d connections asked and taken in %v; server fds %d before, %d during the flood", 2*flood, time.Since(start), before, after)
	if after > bound {
		t.Errorf("the server holds %d descriptors during a flood of %d connections (%d before; caps 20 per client per listener)", after, 2*flood, before)
	}
	// Another client's run.
	resp, err := http.Post(s.url+"/execute", "application/json", strings.NewReader(`{"code": "print(6*7)"}`))
	if err != nil {
		t.Fatalf("a run during the flood: %v", err)
	}
	var res struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != 200 || !res.Success || res.Stdout != "42\n" {
		t.Errorf("a run during the flood: %d %+v", resp.StatusCode, res)
	}
	for _, l := range []string{"rest", "e2b"} {
		if n := probe.MetricLine(t, s.url, `sandbox_connections_refused_total{listener="`+l+`",reason="client_full"}`); n < flood-20-5 {
			t.Errorf("%s: %v connections counted as refused, want about %d", l, n, flood-20)
		}
		if n := probe.MetricLine(t, s.url, `sandbox_connections_open{listener="`+l+`"}`); n < 0 || n > 21+1 {
			t.Errorf("%s: %v connections open, want at most the per-client cap and this scrape", l, n)
		}
	}
	if !regexp.MustCompile(`connection refused: too many open connections.*listener=(rest|e2b)`).MatchString(s.stderr.String()) {
		t.Errorf("no log line for the refused connections:\n%s", s.stderr)
	}
}

// Every listener cuts a body trickled slower than SANDBOX_READ_TIMEOUT,
// and closes a keep-alive connection idle SANDBOX_IDLE_TIMEOUT.
func TestServeListenersCutTrickledBodiesAndIdleConnections(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "SANDBOX_E2B_LISTEN=127.0.0.1:0", "SANDBOX_STATE_DIR="+filepath.Join(dir, "state"), "SANDBOX_AUDIT_DB="+filepath.Join(dir, "audit.db"),
		"SANDBOX_READ_TIMEOUT=2", "SANDBOX_IDLE_TIMEOUT=1")
	for name, l := range map[string]struct{ url, path string }{"rest": {s.url, "/execute"}, "e2b": {s.e2bURL, "/v2/sandboxes"}} {
		url, path := l.url, l.path
		c, err := net.Dial("tcp", hostOf(url))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Millisecond):
					if _, err := io.WriteString(c, "1\r\n \r\n"); err != nil {
						return
					}
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, err = io.ReadAll(c) // an error answer, then the close
		close(stop)
		took := time.Since(start)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: a body trickled a byte every 300 ms was still held after %v (read timeout 2 s)", name, took)
		} else if took > 6*time.Second {
			t.Errorf("%s: the trickled body was cut after %v (read timeout 2 s)", name, took)
		}

		// Idle keep-alive: closed after about a second.
		k, err := net.Dial("tcp", hostOf(url))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		_, _ = io.WriteString(k, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(k)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: GET /health: %v", name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		start = time.Now()
		_ = k.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br.ReadByte(); err == nil {
			t.Errorf("%s: bytes after the answer on an idle connection", name)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: an idle keep-alive connection was still open after 10 s (idle timeout 1 s)", name)
		} else if took := time.Since(start); took > 4*time.Second {
			t.Errorf("%s: an idle connection was closed after %v (idle timeout 1 s)", name, took)
		}
	}
}
