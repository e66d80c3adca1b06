package fleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

var classLimits = jail.Limits{Timeout: time.Minute, CPUTime: 10 * time.Second, MemoryBytes: 256 << 20, OutputBytes: 1 << 20}

func newTestFleet(t *testing.T, max int, queue time.Duration, classes ...ClassSpec) (*Fleet, *fakeStarter, *fakeStarter) {
	t.Helper()
	all := &liveCount{}
	native, gv := &fakeStarter{all: all}, &fakeStarter{all: all, exitAfterReply: 30 * time.Millisecond}
	f := New(Config{MaxSandboxes: max, QueueTimeout: queue, Starters: map[string]Starter{Native: native, GVisor: gv}, Classes: classes})
	t.Cleanup(f.Close)
	return f, native, gv
}

func basic(backend string, ready int) ClassSpec {
	return ClassSpec{Backend: backend, Name: "basic", Ready: ready, Spec: jail.Spec{Argv: []string{"python3"}, Limits: classLimits}}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// Every kind of sandbox draws on one budget: pools of two backends, cold
// runs, sessions (leases held long) and kept spares never exceed it
// together, however hard they are pushed.
func TestBudgetBoundsEveryKind(t *testing.T) {
	const max = 4
	f, native, gv := newTestFleet(t, max, 5*time.Second, basic(Native, 2), basic(GVisor, 2))
	k, err := Keep(f, "session/native", 1, func(ctx context.Context, launch Launch) (*Lease, error) {
		return launch(ctx, Native, jail.Spec{})
	}, (*Lease).Close, (*Lease).alive)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			switch i % 4 {
			case 0: // a pooled run
				l, ok, err := f.Take(ctx, Native, "basic", classLimits)
				if !ok || err != nil {
					fail(err)
					return
				}
				l.Run(runtime.Request{Code: "1"}, nil, nil)
				l.Release()
			case 1: // a cold run on gVisor
				l, err := f.Start(ctx, GVisor, jail.Spec{})
				if err != nil {
					fail(err)
					return
				}
				l.Run(runtime.Request{Code: "1"}, nil, nil)
				l.Release()
			case 2: // a session: held a while, then closed
				l, err := f.Start(ctx, Native, jail.Spec{})
				if err != nil {
					fail(err)
					return
				}
				l.Run(runtime.Request{Code: "1", KeepAlive: true}, nil, nil)
				time.Sleep(5 * time.Millisecond)
				l.Close()
			case 3: // a spare handed out, or a program run
				if l, ok := k.TryGet(); ok {
					k.Release()
					l.Close()
					return
				}
				l, err := f.Start(ctx, Native, jail.Spec{})
				if err != nil {
					fail(err)
					return
				}
				l.WaitProgram()
			}
			if b := f.Budget(); b.InUse > max {
				fail(errors.New("budget over its size"))
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("failures: %v", failures)
	}
	if _, peak := native.all.now(); peak > max {
		t.Fatalf("peak sandboxes %d over the budget of %d", peak, max)
	}
	if native.started.Load() == 0 || gv.started.Load() == 0 {
		t.Fatal("a backend was never used")
	}
	f.Close()
	waitUntil(t, "every slot back", func() bool { return f.Budget().InUse == 0 })
	waitUntil(t, "every sandbox gone", func() bool { live, _ := native.all.now(); return live == 0 })
}

// At exhaustion a caller queues up to the queue timeout, then is told
// busy; a slot freed while it waits lets it through.
func TestExhaustionQueuesThenBusy(t *testing.T) {
	f, _, _ := newTestFleet(t, 1, 80*time.Millisecond)
	held, err := f.Start(context.Background(), Native, jail.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := f.Start(context.Background(), Native, jail.Spec{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("want ErrBusy, got %v", err)
	}
	if waited := time.Since(start); waited < 70*time.Millisecond {
		t.Fatalf("busy after %s, before the queue timeout", waited)
	}
	if b := f.Budget(); b.Busy != 1 || b.InUse != 1 {
		t.Fatalf("budget %+v", b)
	}
	got := make(chan error, 1)
	go func() {
		l, err := f.Start(context.Background(), Native, jail.Spec{})
		if err == nil {
			l.Close()
		}
		got <- err
	}()
	waitUntil(t, "a queued caller", func() bool { return f.Budget().Waiting == 1 })
	held.Close()
	if err := <-got; err != nil {
		t.Fatalf("queued caller: %v", err)
	}
	// A canceled wait is not busy, and gives its place up: canceled once
	// it queues, on a fleet whose queue timeout cannot come first (a
	// loaded host may run the canceling goroutine late).
	f, _, _ = newTestFleet(t, 1, time.Minute)
	held, _ = f.Start(context.Background(), Native, jail.Spec{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for f.Budget().Waiting == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := f.Start(ctx, Native, jail.Spec{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled wait: %v", err)
	}
	held.Close()
	waitUntil(t, "nothing held", func() bool { b := f.Budget(); return b.InUse == 0 && b.Waiting == 0 })
}

// Ready sandboxes are capacity nobody uses: a caller that finds the
// budget spent by them gets a slot at once, not after the queue timeout.
func TestIdlePooledSandboxesGiveWay(t *testing.T) {
	f, native, _ := newTestFleet(t, 2, 5*time.Second, basic(Native, 2))
	waitUntil(t, "the pool full", func() bool { return f.Stats()["basic"].Ready == 2 })
	start := time.Now()
	l, err := f.Start(context.Background(), GVisor, jail.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("waited %s for an idle sandbox's slot", d)
	}
	if b := f.Budget(); b.InUse != 2 {
		t.Fatalf("budget %+v", b)
	}
	waitUntil(t, "the pool shrunk", func() bool { live, _ := native.all.now(); return live == 2 })
	l.Close()
	waitUntil(t, "the pool refilled", func() bool { return f.Stats()["basic"].Ready == 2 })
}

// A run is served from the pool only when its limits are the class's.
func TestTakeServesOnlyFittingRuns(t *testing.T) {
	f, _, _ := newTestFleet(t, 4, time.Second, basic(Native, 1))
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		backend string
		class   string
		lim     jail.Limits
		pooled  bool
	}{
		{"class limits", Native, "basic", classLimits, true},
		{"less CPU", Native, "basic", func() jail.Limits { l := classLimits; l.CPUTime = time.Second; return l }(), true},
		{"more CPU", Native, "basic", func() jail.Limits { l := classLimits; l.CPUTime = time.Hour; return l }(), false},
		{"other memory", Native, "basic", func() jail.Limits { l := classLimits; l.MemoryBytes *= 2; return l }(), false},
		{"other output", Native, "basic", func() jail.Limits { l := classLimits; l.OutputBytes = 10; return l }(), false},
		{"no such class", Native, "data_science", classLimits, false},
		{"no such backend pool", GVisor, "basic", classLimits, false},
	} {
		l, pooled, err := f.Take(ctx, c.backend, c.class, c.lim)
		if pooled != c.pooled || err != nil {
			t.Errorf("%s: pooled %v err %v, want pooled %v", c.name, pooled, err, c.pooled)
		}
		if l != nil {
			l.Release()
		}
	}
}

// The run path: a one-shot run answers with the reply and the output,
// lines streamed as they come; a session's sandbox lives on after its
// reply; a gVisor run answers before its sandbox has ended.
func TestRunPaths(t *testing.T) {
	f, _, _ := newTestFleet(t, 4, time.Second)
	ctx := context.Background()

	var lines []string
	l, _ := f.Start(ctx, Native, jail.Spec{})
	o := l.Run(runtime.Request{Code: "x"}, nil, func(stream, line string) { lines = append(lines, stream+":"+line) })
	l.Release()
	if o.Reply == nil || string(o.Reply.Result) != "42" || o.Stdout != "out\n" || !o.Ended {
		t.Fatalf("one-shot: %+v", o)
	}
	if strings.Join(lines, "") != "stdout:out\n" {
		t.Fatalf("streamed lines %q", lines)
	}

	se, _ := f.Start(ctx, Native, jail.Spec{})
	for i := range 3 {
		o := se.Run(runtime.Request{Code: "x", KeepAlive: true}, nil, nil)
		if o.Reply == nil || o.Ended || o.Stdout != "out\n" {
			t.Fatalf("session run %d: %+v", i, o)
		}
	}
	if b := f.Budget(); b.InUse != 1 {
		t.Fatalf("a live session holds one slot: %+v", b)
	}
	// A restart keeps the slot.
	if err := se.Replace(ctx, jail.Spec{}); err != nil {
		t.Fatal(err)
	}
	if o := se.Run(runtime.Request{Code: "x", KeepAlive: true}, nil, nil); o.Reply == nil || o.Ended {
		t.Fatalf("after restart: %+v", o)
	}
	if b := f.Budget(); b.InUse != 1 {
		t.Fatalf("after restart: %+v", b)
	}
	se.Close()

	g, _ := f.Start(ctx, GVisor, jail.Spec{})
	o = g.Run(runtime.Request{Code: "x"}, nil, nil)
	select {
	case <-g.Done():
		t.Fatal("the gVisor run waited for its sandbox's end")
	default:
	}
	if o.Reply == nil || o.Ended || o.Stdout != "out\n" {
		t.Fatalf("gVisor: %+v", o)
	}
	g.Release()
	if b := f.Budget(); b.InUse != 1 {
		t.Fatalf("the slot came back before the sandbox ended: %+v", b)
	}
	waitUntil(t, "the slot back after the end", func() bool { return f.Budget().InUse == 0 })
}

// A lease given up unused kills its sandbox; a failed start keeps no slot.
func TestReleaseAndFailures(t *testing.T) {
	f, native, _ := newTestFleet(t, 1, 50*time.Millisecond)
	l, err := f.Start(context.Background(), Native, jail.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if e := l.Wait(); e.Limit != jail.LimitNone {
		t.Fatalf("exit %+v", e)
	}
	waitUntil(t, "the slot back", func() bool { return f.Budget().InUse == 0 })
	native.fail.Store(true)
	if _, err := f.Start(context.Background(), Native, jail.Spec{}); err == nil {
		t.Fatal("a failed start succeeded")
	}
	if b := f.Budget(); b.InUse != 0 {
		t.Fatalf("a failed start kept its slot: %+v", b)
	}
	if _, err := f.Start(context.Background(), "nowhere", jail.Spec{}); err == nil {
		t.Fatal("an unknown backend started")
	}
}
