package mcpserver

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// A legacy SSE stream is written by the SDK under a lock, straight to the
// connection: a client that stops reading blocks that write, and every
// finished call's result then waits in memory behind it until the client
// leaves (200 calls of 1 MB: RSS +500 MB). sseWriter stands between: the
// SDK's writes go to a queue, written out by one goroutine with a
// deadline per write; a client whose unsent bytes pass the budget, or
// whose write passes the deadline, is dropped (stream closed, its calls
// canceled, the reason logged).

// SSEBudget is how many bytes a legacy SSE client may have unsent before
// it is dropped (one message larger than this alone still goes out).
var SSEBudget = 16 << 20

// SSEWriteTimeout bounds one write to a legacy SSE client.
var SSEWriteTimeout = 30 * time.Second

// sseCloseTimeout bounds the writes left when the stream ends.
const sseCloseTimeout = time.Second

type sseWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	drop func(error) // called once, when the client is dropped
	// rewrite, when set, sees each event the SDK writes (one per Write)
	// before it is queued: it restores the client's ids.
	rewrite func([]byte) []byte

	wmu sync.Mutex // the real writer: the drain goroutine, or WriteHeader

	mu      sync.Mutex
	queue   [][]byte
	unsent  int
	failed  error // set when dropped: later writes fail at once
	closing bool
	wake    chan struct{}
	done    chan struct{}
}

func newSSEWriter(w http.ResponseWriter, drop func(error), rewrite func([]byte) []byte) *sseWriter {
	s := &sseWriter{w: w, rc: http.NewResponseController(w), drop: drop, rewrite: rewrite, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.drain()
	return s
}

func (s *sseWriter) Header() http.Header { return s.w.Header() }

func (s *sseWriter) WriteHeader(code int) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.w.WriteHeader(code)
}

// Write queues p; it never waits for the client.
func (s *sseWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.rewrite != nil {
		p = s.rewrite(p)
	}
	s.mu.Lock()
	if s.failed != nil {
		err := s.failed
		s.mu.Unlock()
		return 0, err
	}
	if s.unsent > 0 && s.unsent+len(p) > SSEBudget {
		s.mu.Unlock()
		return 0, s.fail(fmt.Errorf("the client did not read: %d bytes unsent, over the budget of %d", s.unsent+len(p), SSEBudget))
	}
	s.queue = append(s.queue, bytes.Clone(p))
	s.unsent += len(p)
	s.mu.Unlock()
	s.signal()
	return n, nil
}

// Flush is the drain's job: it flushes after each write.
func (s *sseWriter) Flush() {}

func (s *sseWriter) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fail drops the client once and returns the error later writes get.
func (s *sseWriter) fail(err error) error {
	s.mu.Lock()
	first := s.failed == nil
	if first {
		s.failed = err
		s.queue, s.unsent = nil, 0
	}
	err = s.failed
	s.mu.Unlock()
	if first {
		s.drop(err)
		s.signal()
	}
	return err
}

func (s *sseWriter) drain() {
	defer close(s.done)
	for range s.wake {
		for {
			s.mu.Lock()
			if s.failed != nil || (s.closing && len(s.queue) == 0) {
				s.mu.Unlock()
				return
			}
			if len(s.queue) == 0 {
				s.mu.Unlock()
				break
			}
			next := s.queue[0]
			s.queue = s.queue[1:]
			timeout := SSEWriteTimeout
			if s.closing {
				timeout = sseCloseTimeout
			}
			s.mu.Unlock()
			if err := s.writeOut(next, timeout); err != nil {
				s.fail(fmt.Errorf("writing to the client: %w", err))
				return
			}
			s.mu.Lock()
			s.unsent -= len(next)
			s.mu.Unlock()
		}
	}
}

func (s *sseWriter) writeOut(b []byte, timeout time.Duration) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// A deadline the writer cannot take (no connection underneath) leaves
	// the budget as the bound.
	_ = s.rc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// close writes what is left (each write within sseCloseTimeout) and waits
// for the drain to end: nothing touches the response after the handler
// returns.
func (s *sseWriter) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.signal()
	// Cut a write in progress to a stalled client short.
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseCloseTimeout))
	<-s.done
}
