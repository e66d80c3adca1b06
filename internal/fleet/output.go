package fleet

import (
	"bytes"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// switchWriter sends a sandbox's output to the run that has it; between
// runs (a pooled sandbox, an idle session) it is dropped.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

// Write implements io.Writer.
func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

// maxPartialLine is how much of a line without end is held before it is
// passed on in pieces.
const maxPartialLine = 64 << 10

// stream collects one run's stdout or stderr. Complete lines go to onLine
// as they come (how surfaces stream output while the code runs). With a
// marker, the harness writes it after the code's output: once it has
// passed, the stream is complete, whether the sandbox has ended or not.
type stream struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	name    string
	onLine  func(stream, line string)
	emitted int // how far onLine has been given the buffer
	marker  []byte
	seen    chan struct{} // closed when the marker has passed
	done    bool          // later writes are not this run's
	// chunks passes on what comes as it comes, lines or not: an
	// interactive program's prompt has no newline after it.
	chunks bool
	// keep, when not 0, bounds what is kept of what onLine was given:
	// the first keep bytes; dropped says something was (Collector.Keep).
	keep    int
	dropped bool
}

func newStream(name, marker string, onLine func(stream, line string)) *stream {
	s := &stream{name: name, onLine: onLine, seen: make(chan struct{})}
	if marker != "" {
		s.marker = []byte(marker)
	}
	return s
}

// Write implements io.Writer.
func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return len(p), nil // a straggler after the run: dropped
	}
	s.buf.Write(p)
	if s.marker != nil {
		if i := bytes.Index(s.buf.Bytes(), s.marker); i >= 0 {
			s.buf.Truncate(i)
			s.done = true
			close(s.seen)
		}
	}
	if s.onLine != nil {
		rest := s.buf.Bytes()[s.emitted:]
		if s.chunks && s.marker == nil {
			// What came, as it came, as E2B's envd passes a read on: a
			// program's "Hello,\nWorld!" is one event, not a line and
			// then its unfinished rest.
			if len(rest) > 0 {
				s.onLine(s.name, string(rest))
				s.emitted += len(rest)
			}
			return len(p), nil
		}
		for {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			s.onLine(s.name, string(rest[:i+1]))
			s.emitted += i + 1
			rest = rest[i+1:]
		}
		// Only complete lines, but without a marker (whose start an
		// unfinished line may be) not forever.
		if s.marker == nil && len(rest) > 0 && (s.chunks || len(rest) > maxPartialLine) {
			s.onLine(s.name, string(rest))
			s.emitted += len(rest)
		}
		s.dropPassed()
	}
	return len(p), nil
}

// dropPassed forgets what onLine was given past the first keep bytes:
// the unfinished line after it stays (at most maxPartialLine).
func (s *stream) dropPassed() {
	if s.keep == 0 || s.emitted <= s.keep {
		return
	}
	b := s.buf.Bytes()
	n := copy(b[s.keep:], b[s.emitted:])
	s.buf.Truncate(s.keep + n)
	s.emitted, s.dropped = s.keep, true
}

// flush passes on an unfinished last line.
func (s *stream) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.onLine == nil || s.emitted >= s.buf.Len() {
		return
	}
	s.onLine(s.name, string(s.buf.Bytes()[s.emitted:]))
	s.emitted = s.buf.Len()
	s.dropPassed()
}

// finish stops collecting: what comes later is not this run's.
func (s *stream) finish() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

// wait blocks until the marker has passed, or d.
func (s *stream) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.seen:
	case <-t.C:
	}
}

// passed reports whether the marker passes within d, before gone closes.
func (s *stream) passed(d time.Duration, gone <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.seen:
		return true
	case <-gone:
		select {
		case <-s.seen: // the copier may still be passing it on
			return true
		default:
			return false
		}
	case <-t.C:
		return false
	}
}

// text is what was collected, as valid UTF-8.
func (s *stream) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.ToValidUTF8(s.buf.String(), "\uFFFD")
}

// output is one run's two streams and their marker.
type output struct {
	marker         string
	stdout, stderr *stream
}

// newOutput collects a run's output; marked runs get an end marker.
func newOutput(marked bool, onLine func(stream, line string)) *output {
	o := &output{}
	if marked {
		o.marker = "\x00codecage-end-" + jail.NewID() + "\n"
	}
	o.stdout = newStream("stdout", o.marker, onLine)
	o.stderr = newStream("stderr", o.marker, onLine)
	return o
}

func (o *output) finish() {
	o.stdout.finish()
	o.stderr.finish()
}

// Collector gathers the output of a program the fleet runs that is not
// the harness (a command, pip): both streams, complete lines passed to
// onLine as they come.
type Collector struct{ out *output }

// NewCollector returns a collector; onLine may be nil.
func NewCollector(onLine func(stream, line string)) *Collector {
	return &Collector{out: newOutput(false, onLine)}
}

// NewInteractiveCollector is NewCollector for a program that is given
// input (a stdin, a terminal): what it writes is passed to onOutput at
// once, complete lines or not.
func NewInteractiveCollector(onOutput func(stream, text string)) *Collector {
	c := NewCollector(onOutput)
	c.out.stdout.chunks, c.out.stderr.chunks = true, true
	return c
}

// Stdout is the standard output collected, as valid UTF-8.
func (c *Collector) Stdout() string { return c.out.stdout.text() }

// Stderr is the standard error collected, as valid UTF-8.
func (c *Collector) Stderr() string { return c.out.stderr.text() }

// Writers are the writers to give a jail.Spec.
func (c *Collector) Writers() (stdout, stderr io.Writer) { return c.out.stdout, c.out.stderr }

// Keep makes the collector keep the first n bytes of each stream alone
// (n > 0; call it before the first write): everything still goes to
// onLine, so that a program's whole output streams while what is kept
// for Stdout and Stderr stays bounded.
func (c *Collector) Keep(n int64) {
	c.out.stdout.keep, c.out.stderr.keep = int(min(n, math.MaxInt32)), int(min(n, math.MaxInt32))
}

// Dropped reports whether Keep's bound dropped output from Stdout or
// Stderr.
func (c *Collector) Dropped() bool {
	for _, s := range []*stream{c.out.stdout, c.out.stderr} {
		s.mu.Lock()
		d := s.dropped
		s.mu.Unlock()
		if d {
			return true
		}
	}
	return false
}

// Flush passes an unfinished last line of each stream to onLine, once the
// program has ended.
func (c *Collector) Flush() {
	c.out.stdout.flush()
	c.out.stderr.flush()
}
