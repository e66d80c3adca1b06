package fleet

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// fakeStarter starts fakeBoxes: a stand-in for the kernel's sandboxes
// that speaks the harness's framing, so the fleet's counting, pooling and
// run path are tested without a jail.
type fakeStarter struct {
	started atomic.Int64
	// all counts the sandboxes of every fake starter that shares it.
	all   *liveCount
	delay time.Duration
	// exitAfterReply makes a one-shot harness end a moment after its
	// reply instead of at once (gVisor's slow shutdown).
	exitAfterReply time.Duration
	fail           atomic.Bool
}

func (fs *fakeStarter) Start(ctx context.Context, spec jail.Spec) (Box, error) {
	if fs.fail.Load() {
		return nil, io.ErrUnexpectedEOF
	}
	time.Sleep(fs.delay)
	fs.started.Add(1)
	fs.all.add(1)
	ours, theirs := net.Pipe()
	b := &fakeBox{id: spec.ID, ch: ours, done: make(chan struct{}), stdout: spec.Stdout, stderr: spec.Stderr, starter: fs}
	go b.harness(theirs, fs.exitAfterReply)
	return b, nil
}

// fakeBox is one fake sandbox whose "harness" answers each request with
// a reply, writing a line to stdout and the end marker first.
type fakeBox struct {
	id             string
	ch             net.Conn
	stdout, stderr io.Writer
	starter        *fakeStarter

	mu    sync.Mutex
	arms  int
	limit jail.Limit
	once  sync.Once
	done  chan struct{}
}

func (b *fakeBox) harness(c net.Conn, linger time.Duration) {
	defer b.end(jail.LimitNone)
	for {
		body, err := runtime.ReadRequest(c)
		if err != nil {
			return
		}
		marker := ""
		if i := bytes.Index(body, []byte("\x00codecage-end-")); i >= 0 {
			if j := bytes.IndexByte(body[i:], '\n'); j >= 0 {
				marker = string(body[i : i+j+1])
			}
		}
		_, _ = io.WriteString(b.stdout, "out\n")
		if marker != "" {
			_, _ = io.WriteString(b.stdout, marker)
			_, _ = io.WriteString(b.stderr, marker)
		}
		if runtime.WriteReply(c, runtime.Reply{Result: []byte("42")}) != nil {
			return
		}
		if !keepAlive(body) {
			time.Sleep(linger)
			return
		}
	}
}

func (b *fakeBox) end(l jail.Limit) {
	b.once.Do(func() {
		b.mu.Lock()
		b.limit = l
		b.mu.Unlock()
		b.ch.Close()
		b.starter.all.add(-1)
		close(b.done)
	})
}

func (b *fakeBox) ID() string                  { return b.id }
func (b *fakeBox) Channel() io.ReadWriteCloser { return b.ch }
func (b *fakeBox) Kill(l jail.Limit)           { b.end(l) }
func (b *fakeBox) Done() <-chan struct{}       { return b.done }
func (b *fakeBox) HostUID() int                { return 4242 }

func (b *fakeBox) Wait() jail.Exit {
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return jail.Exit{Limit: b.limit}
}

func (b *fakeBox) Arm(ctx context.Context, timeout, cpu time.Duration) {
	b.mu.Lock()
	b.arms++
	b.mu.Unlock()
	context.AfterFunc(ctx, func() { b.end(jail.LimitCanceled) })
}

// keepAlive reads the request's keep_alive flag from its marshal encoding:
// the key, then 'T' or 'F'.
func keepAlive(body []byte) bool {
	key := []byte("keep_alive")
	i := bytes.Index(body, key)
	return i >= 0 && i+len(key) < len(body) && body[i+len(key)] == 'T'
}

// liveCount counts live fake sandboxes and the most there ever were.
type liveCount struct {
	mu         sync.Mutex
	live, peak int
}

func (c *liveCount) add(n int) {
	c.mu.Lock()
	c.live += n
	c.peak = max(c.peak, c.live)
	c.mu.Unlock()
}

func (c *liveCount) now() (live, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live, c.peak
}
