package jail

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
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

// copyBufs recycles the copiers' buffers: every sandbox and every cell
// has two copiers, and a pool goes through many cells.
var copyBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// Copy copies stream (0 stdout, 1 stderr) from r to w (nil discards)
// within its budget until r ends, then calls wg.Done. A read that fails
// with [os.ErrDeadlineExceeded] (a read deadline set in the past: the
// sandbox has said its last word and is being finished) ends the copy
// after what the pipe holds already, without waiting for its end.
func (o *Output) Copy(wg *sync.WaitGroup, stream int, r io.Reader, w io.Writer) {
	defer wg.Done()
	if w == nil {
		w = io.Discard
	}
	buf := copyBufs.Get().(*[32 << 10]byte)
	defer copyBufs.Put(buf)
	for {
		n, err := r.Read(buf[:])
		o.write(stream, w, buf[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainNow(r, buf[:], func(b []byte) { o.write(stream, w, b) })
			return
		}
		if err != nil {
			return
		}
	}
}

// write passes b on to w within the stream's budget.
func (o *Output) write(stream int, w io.Writer, b []byte) {
	n := int64(len(b))
	if n == 0 {
		return
	}
	left := o.left[stream].Add(-n) + n
	if left >= n {
		_, _ = w.Write(b)
		return
	}
	if left > 0 {
		_, _ = w.Write(b[:left])
	}
	o.mu.Lock()
	o.truncated[stream] = true
	o.mu.Unlock()
	o.over()
}

// cut reports whether stream was cut.
func (o *Output) cut(stream int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.truncated[stream]
}

// Truncated reports whether either stream was cut.
func (o *Output) Truncated() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.truncated[0] || o.truncated[1]
}

// OutputGrace is how long the output of a machine's ended process is
// awaited: what it wrote is in its pipes at once, but a process it left
// in the background may hold them open for as long as it lives.
const OutputGrace = 100 * time.Millisecond

// AwaitCopies waits for copiers, the copies of an ended process's output
// from readers (nil ones skipped); past OutputGrace, what the readers hold
// now is read at once and the writers left behind are not waited for.
func AwaitCopies(copiers *sync.WaitGroup, readers ...*os.File) {
	copied := make(chan struct{})
	go func() { copiers.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(OutputGrace):
		for _, r := range readers {
			if r != nil {
				_ = r.SetReadDeadline(time.Unix(1, 0))
			}
		}
		<-copied
	}
}

// DropOutput reads r to its end and closes it: a process left behind that
// still writes there is not killed by a closed pipe.
func DropOutput(r *os.File) {
	_ = r.SetReadDeadline(time.Time{})
	_, _ = io.Copy(io.Discard, r)
	_ = r.Close()
}
