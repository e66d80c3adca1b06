package report

import (
	"encoding/binary"
	"sync"
	"time"
)

// A run's output lines reach its client (an event stream, MCP progress
// notifications, an E2B stream, a peer replica) through a Sink: the
// output pump only queues a line, never waits for the client, so a client
// that reads slowly or not at all cannot hold the run past its limit, its
// slot or its session. One goroutine per run delivers the queue. Past
// maxQueuedOutput the rest of the lines are not streamed: the stream is a
// prefix of the output (the result still carries all of it), and the
// result says how much was left out (OutputDropped).

const (
	// maxQueuedOutput bounds what a run's sink holds for its client: about
	// the default output limit of both streams, which the run holds for
	// its result anyway.
	maxQueuedOutput = 2 << 20
	// recordHeader is a queued line's stream and length.
	recordHeader = 5
	// DrainWait bounds how long, once the run has returned (its slot and
	// session released), the client's own request waits for the queue to
	// reach it before the rest is left out.
	DrainWait = 2 * time.Second
)

// Sink is a bounded queue in front of a client's OnOutput.
//
// Locking: mu protects the fields below it and is held only to queue or
// take a line, never while deliver runs (deliver may block on the network
// for as long as the surface's write deadline). The output pump calls put
// with its stream lock held (fleet), so the order is: fleet stream lock,
// then mu; the delivering goroutine takes mu alone, then the surface's
// writer lock without mu.
type Sink struct {
	deliver func(stream, line string)
	wake    chan struct{} // a token when lines were queued or the sink closed
	gone    chan struct{} // closed when the delivering goroutine has returned

	mu sync.Mutex
	// queue[head:] are the waiting lines, each a record: 1 byte for the
	// stream (1: stderr), 4 for the length (big-endian), the line. One
	// buffer, not a string per line: empty lines cost 5 bytes, not 50.
	queue    []byte
	head     int
	dropping bool // a line was left out: so are the later ones
	closed   bool // the run is over: no more lines
	abandon  bool // deliver nothing more
	dropped  OutputDropped
}

// NewSink starts delivering to deliver; nil gives nil (no stream).
func NewSink(deliver func(stream, line string)) *Sink {
	if deliver == nil {
		return nil
	}
	s := &Sink{deliver: deliver, wake: make(chan struct{}, 1), gone: make(chan struct{})}
	go s.run()
	return s
}

// OnOutput is the OnOutput to give the run (nil for a nil sink).
func (s *Sink) OnOutput() func(stream, line string) {
	if s == nil {
		return nil
	}
	return s.put
}

// put queues a line, or counts it left out; it never blocks on the client.
func (s *Sink) put(stream, line string) {
	s.mu.Lock()
	if s.closed || s.dropping || len(s.queue)-s.head+recordHeader+len(line) > maxQueuedOutput {
		s.dropping = true
		s.dropped.Lines++
		s.dropped.Bytes += int64(len(line))
		s.mu.Unlock()
		return
	}
	if s.head > 0 && 2*s.head > cap(s.queue) {
		// Slide the waiting lines down rather than let the buffer grow.
		n := copy(s.queue, s.queue[s.head:])
		s.queue, s.head = s.queue[:n], 0
	}
	var tag byte
	if stream == "stderr" {
		tag = 1
	}
	s.queue = append(s.queue, tag)
	s.queue = binary.BigEndian.AppendUint32(s.queue, uint32(len(line)))
	s.queue = append(s.queue, line...)
	s.mu.Unlock()
	s.signal()
}

func (s *Sink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run delivers the queue in order until the sink is closed and empty, or
// abandoned.
func (s *Sink) run() {
	defer close(s.gone)
	for {
		s.mu.Lock()
		if s.abandon || s.head == len(s.queue) {
			s.queue, s.head = s.queue[:0], 0
			done := s.abandon || s.closed
			s.mu.Unlock()
			if done {
				return
			}
			<-s.wake
			continue
		}
		stream := "stdout"
		if s.queue[s.head] == 1 {
			stream = "stderr"
		}
		n := int(binary.BigEndian.Uint32(s.queue[s.head+1:]))
		line := string(s.queue[s.head+recordHeader : s.head+recordHeader+n])
		s.head += recordHeader + n
		s.mu.Unlock()
		s.deliver(stream, line)
	}
}

// Finish ends the stream once the run has returned: the queue goes on to
// the client for up to wait, then what is left is counted as left out. It
// returns once deliver is no longer called (a delivery under way is
// bounded by the surface's write deadline), so the caller may write its
// result after the lines; nil when nothing was left out.
func (s *Sink) Finish(wait time.Duration) *OutputDropped {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.gone:
	case <-t.C:
		s.mu.Lock()
		s.abandon = true
		for i := s.head; i < len(s.queue); {
			n := int(binary.BigEndian.Uint32(s.queue[i+1:]))
			s.dropped.Lines++
			s.dropped.Bytes += int64(n)
			i += recordHeader + n
		}
		s.queue, s.head = nil, 0
		s.mu.Unlock()
		s.signal()
		<-s.gone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped.Lines == 0 {
		return nil
	}
	d := s.dropped
	return &d
}

// AddDropped adds b's counts to a's (either may be nil).
func AddDropped(a, b *OutputDropped) *OutputDropped {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return &OutputDropped{Lines: a.Lines + b.Lines, Bytes: a.Bytes + b.Bytes}
}
