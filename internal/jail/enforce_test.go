package jail

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSandbox is what an Enforcer acts on: a kill function that records
// the limits, and a CPU counter the test moves.
type fakeSandbox struct {
	kills  chan Limit
	cpu    atomic.Int64
	reads  atomic.Int64
	exited chan struct{}
}

func newFake() *fakeSandbox {
	return &fakeSandbox{kills: make(chan Limit, 16), exited: make(chan struct{})}
}

func (f *fakeSandbox) kill(l Limit) { f.kills <- l }

func (f *fakeSandbox) usage() time.Duration {
	f.reads.Add(1)
	return time.Duration(f.cpu.Load())
}

// start runs an enforcer for f with short ticks; it stops when the test
// ends.
func (f *fakeSandbox) start(t *testing.T, ctx context.Context, timeout, cpu time.Duration, out *Output, idle time.Duration) *Enforcer {
	t.Helper()
	e := NewEnforcer(f.kill, f.usage, out)
	e.tick = 5 * time.Millisecond
	e.SetIdleTick(idle)
	go e.Run(ctx, timeout, cpu, f.exited)
	t.Cleanup(func() {
		select {
		case <-f.exited:
		default:
			close(f.exited)
		}
		<-e.Done()
	})
	return e
}

func (f *fakeSandbox) want(t *testing.T, l Limit) {
	t.Helper()
	select {
	case got := <-f.kills:
		if got != l {
			t.Fatalf("killed for %q, want %q", got, l)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("not killed, want %q", l)
	}
}

func (f *fakeSandbox) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-f.kills:
		t.Fatalf("killed for %q", got)
	case <-time.After(d):
	}
}

func TestEnforcerTimeout(t *testing.T) {
	f := newFake()
	f.start(t, context.Background(), 30*time.Millisecond, time.Hour, nil, 5*time.Millisecond)
	f.want(t, LimitTimeout)
}

func TestEnforcerContext(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	f.start(t, ctx, time.Hour, time.Hour, nil, 5*time.Millisecond)
	f.none(t, 20*time.Millisecond)
	cancel()
	f.want(t, LimitCanceled)
	f.none(t, 20*time.Millisecond) // once

	f = newFake()
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	f.start(t, ctx, time.Hour, time.Hour, nil, 5*time.Millisecond)
	f.want(t, LimitTimeout) // a context deadline is a timeout
}

func TestEnforcerCPUBudgetCountsFromZeroThenFromEachArm(t *testing.T) {
	f := newFake()
	f.cpu.Store(int64(80 * time.Millisecond)) // used before Run: counts
	e := f.start(t, context.Background(), time.Hour, 100*time.Millisecond, nil, 5*time.Millisecond)
	f.none(t, 30*time.Millisecond)
	f.cpu.Store(int64(101 * time.Millisecond))
	f.want(t, LimitCPU)

	// An Arm counts its budget from the usage at the Arm.
	f.cpu.Store(int64(time.Second))
	e.Arm(context.Background(), time.Hour, 100*time.Millisecond)
	if b := e.CPUBase(); b != time.Second {
		t.Fatalf("CPUBase %v, want 1s", b)
	}
	f.cpu.Store(int64(time.Second + 90*time.Millisecond))
	f.none(t, 30*time.Millisecond)
	f.cpu.Store(int64(time.Second + 110*time.Millisecond))
	f.want(t, LimitCPU)
}

func TestEnforcerIdleTickUntilArmed(t *testing.T) {
	f := newFake()
	e := f.start(t, context.Background(), time.Hour, time.Hour, nil, time.Hour)
	// A twin armed from the start: once it has ticked ten times, so could
	// the idle one have, however the host schedules them.
	twin := newFake()
	twin.start(t, context.Background(), time.Hour, time.Hour, nil, time.Hour).Arm(context.Background(), time.Hour, time.Hour)
	waitReads(t, twin, 10)
	if n := f.reads.Load(); n != 0 {
		t.Fatalf("an idle enforcer read the CPU usage %d times while an armed one read it %d times", n, twin.reads.Load())
	}
	e.Arm(context.Background(), time.Hour, time.Hour)
	waitReads(t, f, f.reads.Load()+3) // past the Arm's own reading
}

// waitReads waits until f's usage has been read n times.
func waitReads(t *testing.T, f *fakeSandbox, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); f.reads.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("an armed enforcer read the CPU usage %d times in 10 s, want %d", f.reads.Load(), n)
		}
	}
}

// twinTimesOut waits until an enforcer that is not paused, started now
// with timeout, has timed out: a paused one started before it would have
// by then too, however the host schedules them.
func twinTimesOut(t *testing.T, timeout time.Duration) {
	t.Helper()
	twin := newFake()
	e := NewEnforcer(twin.kill, twin.usage, nil)
	e.tick = 5 * time.Millisecond
	e.Start(context.Background(), timeout, time.Hour)
	defer e.Stop()
	select {
	case l := <-twin.kills:
		if l != LimitTimeout {
			t.Fatalf("the twin was killed for %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an enforcer that is not paused did not time out within 10 s")
	}
}

func TestEnforcerArmReplacesTimeoutAndContext(t *testing.T) {
	f := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	e := f.start(t, ctx, 40*time.Millisecond, time.Hour, nil, 5*time.Millisecond)
	e.Arm(context.Background(), time.Hour, time.Hour)
	cancel() // the old context no longer matters
	f.none(t, 80*time.Millisecond)
	e.Arm(context.Background(), 20*time.Millisecond, time.Hour)
	f.want(t, LimitTimeout)
}

func TestEnforcerArmRenewsOutput(t *testing.T) {
	f := newFake()
	var over atomic.Int64
	out := NewOutput(4, func() { over.Add(1) })
	e := f.start(t, context.Background(), time.Hour, time.Hour, out, 5*time.Millisecond)
	var sink writerFunc = func(p []byte) (int, error) { return len(p), nil }
	out.write(0, sink, []byte("abcd"))
	e.Arm(context.Background(), time.Hour, time.Hour)
	out.write(0, sink, []byte("efgh"))
	if over.Load() != 0 || out.Truncated() {
		t.Fatal("the output budget was not renewed by Arm")
	}
	out.write(0, sink, []byte("i"))
	if over.Load() != 1 || !out.Truncated() {
		t.Fatal("past the renewed budget, the output was not cut")
	}
}

func TestEnforcerEndsWithTheSandbox(t *testing.T) {
	f := newFake()
	e := NewEnforcer(f.kill, nil, nil) // no CPU accounting
	done := make(chan struct{})
	go func() {
		e.Run(context.Background(), time.Hour, time.Hour, f.exited)
		close(done)
	}()
	close(f.exited)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when the sandbox ended")
	}
	<-e.Done()
	// Arm after the end does not block.
	e.Arm(context.Background(), time.Second, time.Second)
	if e.CPUBase() != 0 {
		t.Fatal("CPUBase without accounting")
	}
	f.none(t, 10*time.Millisecond)
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

// Output's copier cuts each stream at its budget and calls over.
func TestOutputCapsEachStream(t *testing.T) {
	var over atomic.Int64
	out := NewOutput(5, func() { over.Add(1) })
	var mu sync.Mutex
	got := [2][]byte{}
	var wg sync.WaitGroup
	wg.Add(2)
	for i, s := range []string{"0123456789", "abc"} {
		go out.Copy(&wg, i, stringsReader(s), writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			got[i] = append(got[i], p...)
			mu.Unlock()
			return len(p), nil
		}))
	}
	wg.Wait()
	if string(got[0]) != "01234" || string(got[1]) != "abc" || !out.Truncated() || over.Load() == 0 {
		t.Fatalf("stdout %q stderr %q truncated %v over %d", got[0], got[1], out.Truncated(), over.Load())
	}
}

// stringsReader returns s in reads of 3 bytes.
func stringsReader(s string) readerFunc {
	return func(p []byte) (int, error) {
		if s == "" {
			return 0, io.EOF
		}
		n := copy(p[:min(len(p), 3)], s)
		s = s[n:]
		return n, nil
	}
}

type readerFunc func([]byte) (int, error)

func (r readerFunc) Read(p []byte) (int, error) { return r(p) }

// A paused enforcer neither times out nor checks the CPU budget; resumed,
// its timeout has what it had left, and an Arm while paused counts from
// the Resume. Pausing or resuming twice changes nothing.
func TestPausedEnforcerHoldsItsLimits(t *testing.T) {
	f := newFake()
	e := NewEnforcer(f.kill, f.usage, nil)
	e.tick = 5 * time.Millisecond
	e.Pause() // before Start: the timeout waits for the Resume
	e.Start(context.Background(), 50*time.Millisecond, time.Second)
	f.cpu.Store(int64(2 * time.Second)) // over budget, but paused
	e.Pause()
	twinTimesOut(t, 50*time.Millisecond)
	select {
	case l := <-f.kills:
		t.Fatalf("killed for %q while paused", l)
	default:
	}
	f.cpu.Store(0)
	e.Resume()
	e.Resume()
	f.want(t, LimitTimeout)

	f = newFake()
	e = NewEnforcer(f.kill, f.usage, nil)
	e.tick = 5 * time.Millisecond
	e.Start(context.Background(), time.Hour, time.Hour)
	e.Pause()
	e.Arm(context.Background(), 50*time.Millisecond, time.Second)
	twinTimesOut(t, 50*time.Millisecond)
	select {
	case l := <-f.kills:
		t.Fatalf("an Arm while paused killed for %q", l)
	default:
	}
	resumed := time.Now()
	e.Resume()
	f.want(t, LimitTimeout)
	if d := time.Since(resumed); d < 40*time.Millisecond {
		t.Fatalf("killed %v after the resume: the Arm's timeout ran while paused", d)
	}
	e.Stop()
	e.Pause() // after Stop: nothing
	e.Resume()
}
