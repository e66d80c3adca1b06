package frontdoor

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Bodies tracks the request bodies still arriving on a server's
// listeners, so that a drain can cut them at its grace: a handler blocked
// reading an upload that a client trickles in a few bytes at a time (which
// ReadTimeout alone lets run for a minute) then fails at once, answers,
// and frees what it holds. Requests whose bodies were read whole are left
// alone: cutting their connection's reads would cancel their context, and
// their answers (a cancelled run's result) must still be written.
type Bodies struct {
	err     error // what a cut body's read returns
	mu      sync.Mutex
	cut     bool
	reading map[*body]struct{}
}

// NewBodies tracks nothing yet. A body cut fails its reads with cutErr
// (the caller's "the server is stopping", which each surface answers as
// such, not as a request the client broke).
func NewBodies(cutErr error) *Bodies {
	if cutErr == nil {
		cutErr = errors.New("the server is stopping: the request body was cut")
	}
	return &Bodies{err: cutErr, reading: map[*body]struct{}{}}
}

// Wrap tracks the bodies of h's requests while they are read.
func (b *Bodies) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		tb := &body{ReadCloser: r.Body, of: b, rc: http.NewResponseController(w)}
		b.mu.Lock()
		cut := b.cut
		if !cut {
			b.reading[tb] = struct{}{}
		}
		b.mu.Unlock()
		if cut { // arrived on a connection that outlived the grace
			tb.cut()
		}
		defer b.forget(tb)
		r.Body = tb
		h.ServeHTTP(w, r)
	})
}

// Cut ends every body still arriving, and any that arrives later: a read
// blocked on the client returns an error now.
func (b *Bodies) Cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = true
	for tb := range b.reading {
		tb.cut()
		delete(b.reading, tb)
	}
}

func (b *Bodies) forget(tb *body) {
	b.mu.Lock()
	delete(b.reading, tb)
	b.mu.Unlock()
}

// body is a request body being read; it is forgotten once read to its end
// (or failed, or closed).
type body struct {
	io.ReadCloser
	of     *Bodies
	rc     *http.ResponseController
	wasCut atomic.Bool
}

func (tb *body) Read(p []byte) (int, error) {
	n, err := tb.ReadCloser.Read(p)
	if err != nil {
		tb.of.forget(tb)
		if err != io.EOF && tb.wasCut.Load() {
			err = tb.of.err
		}
	}
	return n, err
}

func (tb *body) Close() error {
	tb.of.forget(tb)
	return tb.ReadCloser.Close()
}

// cut puts the connection's read deadline in the past: net/http's body
// reader fails with a timeout at its next read, or at once if it waits.
func (tb *body) cut() {
	tb.wasCut.Store(true)
	_ = tb.rc.SetReadDeadline(time.Now())
}
