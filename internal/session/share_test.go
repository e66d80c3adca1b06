package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// The table's counts and its lock order under load: the per-owner share,
// the watches' limit, the spares, the CPU between requests, and runs,
// descriptions, pauses and closes racing one another.

// TestKeyShare: an owner holds at most SANDBOX_KEY_MAX_SESSIONS sessions,
// paused ones included; other owners are not affected; Room answers a
// fork's question for n at once.
func TestKeyShare(t *testing.T) {
	tab, _ := testTable(t, 8, func(c *config.Config) { c.KeyMaxSessions = 2 })
	a1, _ := create(t, tab, Request{Owner: "key:alice"}, native)
	create(t, tab, Request{Owner: "key:alice"}, native)
	if _, err := tab.Pause(context.Background(), a1, false); err != nil {
		t.Fatal(err)
	}
	_, err := tab.Create(context.Background(), Request{Owner: "key:alice"}, native)
	if !errors.Is(err, ErrKeyLimit) || !strings.Contains(err.Error(), "SANDBOX_KEY_MAX_SESSIONS=2") || !strings.Contains(err.Error(), "paused ones included") {
		t.Fatalf("a third session: %v, want ErrKeyLimit naming the share", err)
	}
	if err := tab.Room("key:alice", 1); !errors.Is(err, ErrKeyLimit) {
		t.Errorf("Room(alice, 1) = %v", err)
	}
	create(t, tab, Request{Owner: "key:bob"}, native)
	if err := tab.Room("key:bob", 1); err != nil {
		t.Errorf("Room(bob, 1) = %v", err)
	}
	err = tab.Room("key:bob", 3)
	if !errors.Is(err, ErrKeyLimit) || !strings.Contains(err.Error(), "ask for at most 1") {
		t.Errorf("Room(bob, 3) = %v, want ErrKeyLimit offering 1", err)
	}
	tab.Drop(a1)
	if _, err := tab.Create(context.Background(), Request{Owner: "key:alice"}, native); err != nil {
		t.Errorf("a session after a drop freed the share: %v", err)
	}
	if n := len(tab.List("key:alice")); n != 2 {
		t.Errorf("alice has %d sessions, want 2", n)
	}
}

// TestNoShareWithoutAKeyLimit: KeyMaxSessions 0 lets an owner open up to
// SANDBOX_MAX_SESSIONS.
func TestNoShareWithoutAKeyLimit(t *testing.T) {
	tab, _ := testTable(t, 8, func(c *config.Config) { c.KeyMaxSessions, c.MaxSessions = 0, 3 })
	for range 3 {
		create(t, tab, Request{Owner: "o"}, native)
	}
	if err := tab.Room("o", 100); err != nil {
		t.Errorf("Room without a share: %v", err)
	}
	if _, err := tab.Create(context.Background(), Request{Owner: "o"}, native); !errors.Is(err, ErrTooMany) {
		t.Errorf("past SANDBOX_MAX_SESSIONS: %v, want ErrTooMany", err)
	}
}

// TestWatchLimitAndPause: a session has at most limit watches; a pause
// stops them (out of the session's locks) and refuses new ones until it
// resumes; a drop stops them too.
func TestWatchLimitAndPause(t *testing.T) {
	tab, _ := testTable(t, 2)
	se, _ := create(t, tab, Request{Owner: "o", ManualResume: true}, native)
	stopped := make(chan int, 8)
	watch := func(n int) (func(), error) {
		dir, done, err := tab.StartWatch(context.Background(), se, 2, func() {
			if !se.lifeMu.TryLock() {
				t.Errorf("watch %d stopped under lifeMu", n)
			} else {
				se.lifeMu.Unlock()
			}
			stopped <- n
		})
		if err == nil && !strings.HasSuffix(dir, se.ID()) {
			t.Errorf("StartWatch gave %q, not the workspace", dir)
		}
		return done, err
	}
	done1, err := watch(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch(2); err != nil {
		t.Fatal(err)
	}
	if _, err := watch(3); !errors.Is(err, ErrTooManyWatches) {
		t.Fatalf("a third watch: %v, want ErrTooManyWatches", err)
	}
	done1()
	if se.Watches() != 1 {
		t.Errorf("Watches = %d after one ended, want 1", se.Watches())
	}
	if _, err := tab.Pause(context.Background(), se, true); err != nil {
		t.Fatal(err)
	}
	if n := <-stopped; n != 2 {
		t.Errorf("the pause stopped watch %d, want 2", n)
	}
	if _, err := watch(4); !errors.Is(err, ErrPaused) {
		t.Errorf("a watch while paused (manual resume): %v, want ErrPaused", err)
	}
	if _, _, err := tab.Resume(context.Background(), se); err != nil {
		t.Fatal(err)
	}
	if _, err := watch(5); err != nil {
		t.Fatalf("a watch after the resume: %v", err)
	}
	tab.Drop(se)
	if n := <-stopped; n != 5 {
		t.Errorf("the drop stopped watch %d, want 5", n)
	}
	if _, err := watch(6); !errors.Is(err, ErrNotFound) {
		t.Errorf("a watch of a dropped session: %v, want ErrNotFound", err)
	}
}

// TestCPUBetweenRequests: a request runs at SANDBOX_CPU_LIMIT, the
// session idles at SANDBOX_SESSION_IDLE_CPU, and what it spent idling is
// reported to its next request and counted in the table's IdleCPU.
func TestCPUBetweenRequests(t *testing.T) {
	tab, f := testTable(t, 1, func(c *config.Config) { c.CPULimit, c.IdleCPU = 2, 0.25 })
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	box := f.native.last()
	if _, err := run(t, tab, se, "x", fleet.Limits{}); err != nil {
		t.Fatal(err)
	}
	if c := box.lastCores(); c != 0.25 {
		t.Fatalf("after a request the sandbox has %v cores, want the idle 0.25", c)
	}
	box.spend(300 * time.Millisecond)
	r, err := tab.BeginRun(context.Background(), se, fleet.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Idle != 300*time.Millisecond || box.lastCores() != 2 {
		t.Errorf("a request after idling: Idle %v, %v cores; want 300ms at 2", r.Idle, box.lastCores())
	}
	// A command meanwhile keeps the full bandwidth after the run ends.
	_, _, finish := command(t, tab, se, false)
	r.Do(fleet.HarnessRequest{Code: "x", KeepAlive: true}, nil, nil)
	r.End()
	if c := box.lastCores(); c != 2 {
		t.Errorf("with a command running the sandbox has %v cores, want 2", c)
	}
	finish()
	if c := box.lastCores(); c != 0.25 {
		t.Errorf("after the last request the sandbox has %v cores, want 0.25", c)
	}
	box.spend(time.Second)
	tab.Drop(se)
	if got := tab.IdleCPU(); got != 1300*time.Millisecond {
		t.Errorf("IdleCPU = %v, want 1.3s (the idle time reported at the run and at the drop)", got)
	}
}

// TestCPUSinceLastSample: samples are differences, never negative.
func TestCPUSinceLastSample(t *testing.T) {
	se := &Session{created: time.Now().Add(-time.Second)}
	now := time.Now()
	if used, wall := se.CPUSinceLastSample(now, 200*time.Millisecond); used != 200*time.Millisecond || wall < time.Second {
		t.Errorf("first sample: %v over %v", used, wall)
	}
	if used, wall := se.CPUSinceLastSample(now.Add(time.Second), 100*time.Millisecond); used != 0 || wall != time.Second {
		t.Errorf("a sample after commands ended: %v over %v, want 0 over 1s", used, wall)
	}
}

// TestSpares: a spare session is handed to a request of its shape, under
// a new id and owner, without a sandbox started for it; a request of
// another shape (a home, variables) starts its own.
func TestSpares(t *testing.T) {
	tab, f := testTable(t, 4)
	imports := policy.ImportPolicy{Profiles: []string{"basic"}}
	limits := fleet.Limits{MemoryBytes: 256 << 20}
	tab.StartSpares(imports, limits, map[string]int{fleet.Native: 1})
	waitFor(t, "a spare", func() bool { return f.Stats()["session/native"].Ready == 1 })
	if !tab.FitsSpares(imports, limits) || tab.FitsSpares(imports, fleet.Limits{MemoryBytes: 1}) {
		t.Fatal("FitsSpares does not tell the spares' shape from another")
	}
	started := f.native.started.Load()
	shape := Shape{Imports: imports, Limits: limits, Backend: fleet.Native}
	se, info := create(t, tab, Request{Owner: "key:alice", Lifetime: time.Hour}, shape)
	// The pool refills in the background: one sandbox, the refill's.
	waitFor(t, "the refill", func() bool { return f.Stats()["session/native"].Ready == 1 })
	if n := f.native.started.Load() - started; n != 1 {
		t.Errorf("%d sandboxes started for a fitting request and the refill, want 1 (the refill's)", n)
	}
	if info.ID != "s1" || se.Owner() != "key:alice" || se.Deadline().IsZero() {
		t.Errorf("the spare became %+v, owner %q, deadline %v", info, se.Owner(), se.Deadline())
	}
	if o, err := run(t, tab, se, "x", fleet.Limits{}); err != nil || o.Ended {
		t.Errorf("a run in the spare: %+v, %v", o, err)
	}
	waitFor(t, "the refill", func() bool { return f.Stats()["session/native"].Ready == 1 })
	before := f.native.started.Load()
	other, _ := create(t, tab, Request{Owner: "key:alice", Home: "/home/user"}, shape)
	if other.Home() != "/home/user" || f.native.started.Load() != before+1 {
		t.Errorf("a request with its own home: home %q, %d started", other.Home(), f.native.started.Load()-before)
	}
}

// TestConcurrentRunsDescribesPausesAndCloses: under -race, several
// owners' sessions run, are described, listed, paused, resumed, given
// commands and dropped at once, then CloseAll ends the rest: nothing is
// left of them, in the table, the budget or the state directory.
func TestConcurrentRunsDescribesPausesAndCloses(t *testing.T) {
	tab, f := testTable(t, 16, func(c *config.Config) { c.KeyMaxSessions = 3 })
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for o := range 4 {
		owner := fmt.Sprintf("key:%d", o)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- exercise(tab, owner)
			}()
		}
	}
	// Readers that never wait for a run.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for o := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, info := range tab.List(fmt.Sprintf("key:%d", o)) {
					if se, err := tab.Get(info.ID, info.ID); err == nil {
						errs <- fmt.Errorf("%s found under its id as owner: %v", info.ID, se)
					}
				}
				tab.Each(func(se *Session) {
					_ = tab.Describe(se)
					_ = se.Paused()
					_ = se.Usage()
				})
				_ = tab.Count()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	tab.CloseAll()
	if tab.Count() != 0 {
		t.Errorf("%d sessions left after CloseAll", tab.Count())
	}
	inUse(t, f, 0)
	if left := workspaces(t, tab.cfg.StateDir); len(left) != 0 {
		t.Errorf("left in the state directory: %v", left)
	}
}

// exercise is one client's session: runs, a command, a pause and a
// resume, a description, and maybe a drop.
func exercise(tab *Table, owner string) error {
	ctx := context.Background()
	info, err := tab.Create(ctx, Request{Owner: owner}, native)
	if err != nil {
		return err
	}
	se, err := tab.Get(info.ID, owner)
	if err != nil {
		return err
	}
	for i := range 5 {
		r, err := tab.BeginRun(ctx, se, fleet.Limits{Timeout: 10 * time.Second}, nil)
		if err != nil {
			return err
		}
		o := r.Do(fleet.HarnessRequest{Code: "x", KeepAlive: true}, nil, nil)
		r.End()
		if o.Ended {
			return fmt.Errorf("run %d of %s ended its session: %+v", i, se.ID(), o.Exit)
		}
		if i == 2 {
			cctx, _, done, err := tab.StartCommand(ctx, se)
			if err != nil {
				return err
			}
			go func() {
				<-cctx.Done()
				done()
			}()
		}
	}
	if _, err := tab.Pause(ctx, se, true); err != nil {
		return err
	}
	if _, _, err := tab.Resume(ctx, se); err != nil {
		return err
	}
	if d := tab.Describe(se); d.Runs != 5 || d.State != "running" {
		return fmt.Errorf("%s described as %+v", se.ID(), d)
	}
	if se.ID()[len(se.ID())-1]%2 == 0 {
		tab.Drop(se)
	}
	return nil
}

// TestDescribeDoesNotWaitForARun: while a request runs, Describe and
// List answer at once with the session as the request found it, its
// moved deadline included; a drop ends the run in progress.
func TestDescribeDoesNotWaitForARun(t *testing.T) {
	tab, f := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	r, err := tab.BeginRun(context.Background(), se, fleet.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	outcome := make(chan fleet.Outcome, 1)
	go func() {
		outcome <- r.Do(fleet.HarnessRequest{Code: codeHang, KeepAlive: true}, nil, nil)
		r.End()
	}()
	tab.ExpireAfter(se, time.Hour)
	answered := make(chan Info, 1)
	go func() { answered <- tab.Describe(se) }()
	select {
	case info := <-answered:
		if info.Runs != 1 || time.Until(info.ExpiresAt) < 59*time.Minute {
			t.Errorf("described during the run as %+v", info)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Describe waited for the run")
	}
	if l := tab.List("o"); len(l) != 1 {
		t.Errorf("List during the run: %+v", l)
	}
	tab.Drop(se)
	o := <-outcome
	if !o.Ended || o.Exit.Limit != fleet.LimitCanceled {
		t.Errorf("the run the drop ended: %+v", o)
	}
	inUse(t, f, 0)
}
