package streamwrite_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/streamwrite"
)

// A client that stops reading a stream loses it within the per-write
// deadline: the handler's writes fail and it returns, though the server
// has no write timeout (a stream's case).
func TestStalledClientLosesTheStream(t *testing.T) {
	ended := make(chan time.Duration, 1)
	var stalledAt time.Time
	h := streamwrite.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w.Header().Set("Content-Type", "text/event-stream")
		line := []byte("data: " + strings.Repeat("x", 4000) + "\n\n")
		for time.Since(start) < 30*time.Second {
			if _, err := w.Write(line); err != nil {
				break
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				break
			}
		}
		ended <- time.Since(stalledAt)
	}), 500*time.Millisecond)
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	stalledAt = time.Now()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Never read: the kernel's buffers fill, then a write blocks.
	select {
	case d := <-ended:
		t.Logf("the handler ended %v after the client stopped reading", d)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still writes 10 s after its client stopped reading")
	}
}

// Wrapped, a writer still flushes and its deadline can still be set.
func TestWrappedWriterKeepsItsInterfaces(t *testing.T) {
	rec := httptest.NewRecorder()
	w := streamwrite.Wrap(rec, time.Second)
	if _, ok := w.(http.Flusher); !ok {
		t.Fatal("not a Flusher")
	}
	_, _ = w.Write([]byte("a"))
	if err := http.NewResponseController(w).Flush(); err != nil || !rec.Flushed {
		t.Fatalf("flush: %v %v", err, rec.Flushed)
	}
	if streamwrite.Wrap(rec, 0) != http.ResponseWriter(rec) {
		t.Fatal("d <= 0 must leave the writer as it is")
	}
}
