// Package streamwrite bounds each write of a long-lived HTTP answer: an
// event stream, NDJSON lines, a Connect stream, MCP notifications. The
// server's write timeout cannot, as a stream lasts as long as its run; so
// every write gets a deadline of its own, and a client that stops reading
// loses its connection when one passes (its handler's writes then fail at
// once) instead of holding a goroutine, a buffer and the stream's lock for
// as long as it likes.
package streamwrite

import (
	"net/http"
	"time"
)

// Wrap returns w with a write deadline of d set before each write, flush
// and header; d <= 0 returns w as it is. It keeps http.Flusher and
// unwraps for http.ResponseController.
func Wrap(w http.ResponseWriter, d time.Duration) http.ResponseWriter {
	if d <= 0 {
		return w
	}
	if _, ok := w.(*writer); ok {
		return w
	}
	return &writer{ResponseWriter: w, rc: http.NewResponseController(w), d: d}
}

// Handler serves h with every answer wrapped by Wrap.
func Handler(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(Wrap(w, d), r)
	})
}

// writer is used as a ResponseWriter is: by one goroutine at a time.
type writer struct {
	http.ResponseWriter
	rc    *http.ResponseController
	d     time.Duration
	armed time.Time // when the deadline was last set
}

// arm sets the deadline of the next write; it also replaces the server's
// whole-answer write timeout, which a stream outlives. A deadline set
// less than d/8 ago is kept (a write then has at least 7/8 of d), which
// spares a timer update per line of a busy stream.
func (w *writer) arm() {
	now := time.Now()
	if now.Sub(w.armed) < w.d/8 {
		return
	}
	w.armed = now
	_ = w.rc.SetWriteDeadline(now.Add(w.d))
}

func (w *writer) WriteHeader(code int) {
	w.arm()
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher (some writers type-assert it).
func (w *writer) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *writer) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Unwrap gives http.ResponseController the writer beneath.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
