package report

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// A client that never returns from its OnOutput never blocks the run's
// pump: put returns at once, at most maxQueuedOutput is held, and the
// lines past it are counted; the stream stays a prefix of the output.
func TestOutputSinkNeverBlocksThePump(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []string
	s := NewSink(func(stream, line string) {
		mu.Lock()
		got = append(got, line)
		mu.Unlock()
		<-release // a client that stopped reading
	})
	line := strings.Repeat("x", 1000) + "\n"
	start := time.Now()
	const n = 10000 // 10 MB: five times the bound
	for range n {
		s.put("stdout", line)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("10,000 puts took %v with a stalled client", d)
	}
	s.mu.Lock()
	held := len(s.queue) - s.head
	s.mu.Unlock()
	if held > maxQueuedOutput {
		t.Fatalf("held %d bytes, bound %d", held, maxQueuedOutput)
	}
	// The run is over: the rest waits DrainWait for the client, then is
	// left out; the delivery under way finishes first (a surface's write
	// deadline bounds it).
	time.AfterFunc(300*time.Millisecond, func() { close(release) })
	start = time.Now()
	dropped := s.Finish(100 * time.Millisecond)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("finish took %v", d)
	}
	mu.Lock()
	delivered := len(got)
	mu.Unlock()
	if dropped == nil || dropped.Lines+int64(delivered) != n || dropped.Bytes != dropped.Lines*int64(len(line)) {
		t.Fatalf("delivered %d, dropped %+v, of %d", delivered, dropped, n)
	}
	// The deliverer has ended (nothing can come after), not just paused.
	select {
	case <-s.gone:
	default:
		t.Fatal("the deliverer still runs after finish returned")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != delivered {
		t.Fatalf("lines delivered after finish returned: %d, then %d", delivered, len(got))
	}
}

// A client that keeps up gets every line, in order, before finish returns;
// nothing is reported left out.
func TestOutputSinkDeliversInOrder(t *testing.T) {
	var got []string
	s := NewSink(func(stream, line string) { got = append(got, stream+":"+line) })
	var want []string
	for i := range 20000 {
		stream := "stdout"
		if i%3 == 0 {
			stream = "stderr"
		}
		line := fmt.Sprintf("%d\n", i)
		s.put(stream, line)
		want = append(want, stream+":"+line)
		if i%1000 == 0 {
			time.Sleep(time.Millisecond) // let the deliverer catch up
		}
	}
	if d := s.Finish(10 * time.Second); d != nil {
		t.Fatalf("dropped %+v from a client that keeps up", d)
	}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("got %d lines, want %d, or out of order", len(got), len(want))
	}
	var nilSink *Sink
	if nilSink.OnOutput() != nil || nilSink.Finish(time.Second) != nil || NewSink(nil) != nil {
		t.Fatal("no OnOutput: no sink")
	}
}
