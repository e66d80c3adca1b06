package frontdoor

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// dialFrom connects to addr from the loopback address src (Linux routes
// all of 127/8 to lo), so that a test has several client addresses.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// served dials addr from src and reports whether a request on the new
// connection is answered (false: refused, at the dial or after).
func served(t *testing.T, src, addr string) bool {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return false
	}
	t.Cleanup(func() { c.Close() })
	return alive(c)
}

// alive sends a request on c and reports whether an answer came back
// (false: the server closed the connection).
func alive(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusNoContent
}

type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) add(listener, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[listener+" "+reason]++
}

func (r *refusals) get(k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[k]
}

// A listener holds at most MaxConnsPerClient connections of one client
// address and MaxConns in all; the ones over are closed at once and
// counted, and a place freed is taken again.
func TestListenerCapsConnections(t *testing.T) {
	s := Settings{ReadTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxConns: 5, MaxConnsPerClient: 3}
	var logs strings.Builder
	ref := &refusals{n: map[string]int{}}
	l, err := Listen("test", "127.0.0.1:0", s, slog.New(slog.NewTextHandler(&syncBuilder{b: &logs}, nil)), ref.add)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }), s, slog.Default())
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	addr := l.Addr().String()

	var a []net.Conn
	for i := range 3 {
		a = append(a, dialFrom(t, "127.0.0.1", addr))
		if !alive(a[i]) {
			t.Fatalf("connection %d of 127.0.0.1 (within its cap of 3) was refused", i+1)
		}
	}
	start := time.Now()
	if served(t, "127.0.0.1", addr) {
		t.Fatal("a 4th connection of 127.0.0.1 was served over its cap of 3")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the connection over the cap was closed after %v, not at once", d)
	}
	b := []net.Conn{dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)}
	for _, c := range b {
		if !alive(c) {
			t.Fatal("another client address was refused while the listener had room")
		}
	}
	if served(t, "127.0.0.3", addr) {
		t.Fatal("a 6th connection was served over the listener's cap of 5")
	}
	if got := l.Open(); got != 5 {
		t.Errorf("open connections: %d, want 5", got)
	}
	if ref.get("test client_full") != 1 || ref.get("test listener_full") != 1 {
		t.Errorf("refusals counted: %v, want one client_full and one listener_full", ref.n)
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("no log line for the refused connections: %q", logs.String())
	}
	// A place freed is taken again.
	a[0].Close()
	waitFor(t, func() bool { return l.Open() == 4 })
	if !served(t, "127.0.0.3", addr) {
		t.Fatal("a connection was refused after a place was freed")
	}
}

// A body trickled slower than the read timeout is cut at the timeout: the
// server closes the connection, and the handler's read fails.
func TestServerCutsTrickledBody(t *testing.T) {
	s := Settings{ReadHeaderTimeout: time.Second, ReadTimeout: time.Second, IdleTimeout: time.Minute, MaxConns: 10, MaxConnsPerClient: 10}
	l, err := Listen("test", "127.0.0.1:0", s, slog.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}), s, slog.Default())
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c := dialFrom(t, "127.0.0.1", l.Addr().String())
	start := time.Now()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				if _, err := io.WriteString(c, "1\r\na\r\n"); err != nil {
					return
				}
			}
		}
	}()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the trickled body was read whole")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the body was cut after %v, the read timeout is 1 s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a body trickled a byte every 200 ms was still being read after 10 s (read timeout 1 s)")
	}
	waitFor(t, func() bool { return l.Open() == 0 })
}

// The caps fit in the part of the open-file limit left beside the
// sandboxes' share.
func TestWithinFileLimit(t *testing.T) {
	s := Settings{MaxConns: 1024, MaxConnsPerClient: 256}
	for _, tc := range []struct {
		fds              uint64
		listeners        int
		wantMax, wantPer int
	}{
		{0, 2, 1024, 256},
		{1 << 20, 2, 1024, 256},
		{1024, 2, 256, 256},
		{1024, 1, 512, 256},
		{100, 2, 25, 25},
		{1, 2, 1, 1},
	} {
		got := WithinFileLimit(s, tc.listeners, tc.fds)
		if got.MaxConns != tc.wantMax || got.MaxConnsPerClient != tc.wantPer {
			t.Errorf("fds %d, %d listeners: caps %d/%d, want %d/%d", tc.fds, tc.listeners, got.MaxConns, got.MaxConnsPerClient, tc.wantMax, tc.wantPer)
		}
		if tc.fds > 0 && uint64(got.MaxConns*tc.listeners) > tc.fds/2+uint64(tc.listeners) {
			t.Errorf("fds %d: %d listeners of %d connections leave less than half for sandboxes", tc.fds, tc.listeners, got.MaxConns)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type syncBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
