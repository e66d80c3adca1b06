package jail

import (
	"io"
	"sync"
	"sync/atomic"
)

// Output caps a sandbox's stdout and stderr, each at a budget that the
// sandbox's next piece of work can renew. Past the budget a stream's bytes
// are dropped, the stream is marked truncated, and the over function runs
// (it kills the sandbox): a flood stops at once instead of filling memory.
type Output struct {
	budget    int64
	left      [2]atomic.Int64
	over      func()
	mu        sync.Mutex
	truncated [2]bool
}

// NewOutput returns caps of budget bytes per stream that call over when a
// stream passes its cap.
func NewOutput(budget int64, over func()) *Output {
	o := &Output{budget: budget, over: over}
	o.Renew()
	return o
}

// Renew gives both streams their whole budget again.
func (o *Output) Renew() {
	o.left[0].Store(o.budget)
	o.left[1].Store(o.budget)
}

// Copy copies stream (0 stdout, 1 stderr) from r to w (nil discards)
// within its budget until r ends, then calls wg.Done.
func (o *Output) Copy(wg *sync.WaitGroup, stream int, r io.Reader, w io.Writer) {
	defer wg.Done()
	if w == nil {
		w = io.Discard
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			left := o.left[stream].Add(-int64(n)) + int64(n)
			if left >= int64(n) {
				_, _ = w.Write(buf[:n])
			} else {
				if left > 0 {
					_, _ = w.Write(buf[:left])
				}
				o.mu.Lock()
				o.truncated[stream] = true
				o.mu.Unlock()
				o.over()
			}
		}
		if err != nil {
			return
		}
	}
}

// Truncated reports whether either stream was cut.
func (o *Output) Truncated() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.truncated[0] || o.truncated[1]
}
