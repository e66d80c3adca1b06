package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// item is a made thing holding its budget slot.
type item struct {
	n    int64
	slot *Slot
}

// counter makes numbered items and records which were destroyed.
type counter struct {
	made, destroyed atomic.Int64
	delay           time.Duration
	fail            atomic.Bool
	dead            sync.Map
}

func (c *counter) create(ctx context.Context, slot *Slot) (*item, error) {
	if c.fail.Load() {
		return nil, errors.New("cannot make one")
	}
	time.Sleep(c.delay)
	return &item{n: c.made.Add(1), slot: slot}, nil
}

func (c *counter) destroy(it *item) {
	c.destroyed.Add(1)
	it.slot.Release()
}

func (c *counter) alive(it *item) bool { _, dead := c.dead.Load(it.n); return !dead }

// done is what a holder does when its item ends.
func done[T any](p *Pool[T], it *item) {
	it.slot.Release()
	p.Release()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestPoolFillsAndRefillsAfterABurst(t *testing.T) {
	c := &counter{delay: 2 * time.Millisecond}
	p := New(Config{Ready: 3, Budget: NewBudget(10), Refillers: 2}, c.create, c.destroy, c.alive)
	defer p.Close()
	waitFor(t, "3 ready", func() bool { return p.Stats().Ready == 3 })
	var got []*item
	for range 6 { // a burst larger than the pool
		it, err := p.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, it)
	}
	s := p.Stats()
	if s.InUse != 6 || s.Hits < 3 {
		t.Fatalf("after burst: %+v", s)
	}
	for _, it := range got {
		done(p, it)
	}
	waitFor(t, "refill to 3", func() bool { return p.Stats().Ready == 3 })
}

func TestPoolIsBoundedAndSaysBusy(t *testing.T) {
	c := &counter{}
	b := NewBudget(2)
	p := New(Config{Ready: 1, Budget: b, QueueTimeout: 50 * time.Millisecond}, c.create, c.destroy, c.alive)
	defer p.Close()
	x, _ := p.Get(context.Background())
	y, _ := p.Get(context.Background())
	if x == nil || y == nil {
		t.Fatal("no items")
	}
	start := time.Now()
	if _, err := p.Get(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("want ErrBusy, got %v", err)
	}
	if time.Since(start) < 40*time.Millisecond {
		t.Fatal("did not wait for the queue timeout")
	}
	// An item's end lets a waiter through.
	res := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background())
		res <- err
	}()
	waitFor(t, "a queued caller", func() bool { return b.Stats().Waiting == 1 })
	done(p, x)
	if err := <-res; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if s, bs := p.Stats(), b.Stats(); s.Busy != 1 || bs.Busy != 1 || bs.InUse > 2 {
		t.Fatalf("stats %+v %+v", s, bs)
	}
}

// Two pools and sandboxes outside any pool share one budget: together
// they never exceed it, and a caller that finds it spent by idle sandboxes
// of another pool gets one of their slots instead of waiting.
func TestBudgetIsSharedAndIdleItemsGiveWay(t *testing.T) {
	b := NewBudget(4)
	ca, cb := &counter{}, &counter{}
	pa := New(Config{Ready: 3, Budget: b, QueueTimeout: 2 * time.Second}, ca.create, ca.destroy, ca.alive)
	defer pa.Close()
	pb := New(Config{Ready: 3, Budget: b, QueueTimeout: 2 * time.Second}, cb.create, cb.destroy, cb.alive)
	defer pb.Close()
	waitFor(t, "the budget spent by refills", func() bool { return b.Stats().InUse == 4 })
	if r := pa.Stats().Ready + pb.Stats().Ready; r != 4 {
		t.Fatalf("ready %d, want the budget's 4", r)
	}
	// A sandbox outside the pools: an idle pooled one makes room.
	cold, err := b.Acquire(context.Background(), time.Second)
	if err != nil {
		t.Fatalf("cold acquire: %v", err)
	}
	if s := b.Stats(); s.InUse != 4 {
		t.Fatalf("budget over: %+v", s)
	}
	var held []*item
	for range 3 {
		it, err := pa.Get(context.Background())
		if err != nil {
			t.Fatalf("pool a: %v", err)
		}
		held = append(held, it)
	}
	if s := b.Stats(); s.InUse != 4 || pb.Stats().Ready != 0 {
		t.Fatalf("after taking 3 from a: budget %+v, b ready %d", s, pb.Stats().Ready)
	}
	// Spent by running items: the next caller waits, and gets through when one ends.
	if got := b.TryAcquire(); got != nil {
		t.Fatal("TryAcquire past the budget")
	}
	res := make(chan error, 1)
	go func() {
		it, err := pb.Get(context.Background())
		if err == nil {
			done(pb, it)
		}
		res <- err
	}()
	waitFor(t, "the queued caller", func() bool { return b.Stats().Waiting == 1 })
	cold.Release()
	if err := <-res; err != nil {
		t.Fatalf("queued get: %v", err)
	}
	for _, it := range held {
		done(pa, it)
	}
	pa.Close()
	pb.Close()
	if s := b.Stats(); s.InUse != 0 {
		t.Fatalf("slots left after close: %+v", s)
	}
}

// Refills never overtake a queued caller.
func TestBudgetQueueComesBeforeRefills(t *testing.T) {
	b := NewBudget(1)
	first, _ := b.Acquire(context.Background(), time.Second)
	got := make(chan *Slot, 1)
	go func() {
		s, _ := b.Acquire(context.Background(), 5*time.Second)
		got <- s
	}()
	waitFor(t, "queued", func() bool { return b.Stats().Waiting == 1 })
	first.Release()
	if b.TryAcquire() != nil {
		t.Fatal("a refill took the queued caller's slot")
	}
	s := <-got
	if s == nil {
		t.Fatal("queued caller got nothing")
	}
	s.Release()
	s.Release() // idempotent
	if st := b.Stats(); st.InUse != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestPoolDropsDeadItems(t *testing.T) {
	c := &counter{}
	p := New(Config{Ready: 2, Budget: NewBudget(4)}, c.create, c.destroy, c.alive)
	defer p.Close()
	waitFor(t, "2 ready", func() bool { return p.Stats().Ready == 2 })
	c.dead.Store(int64(1), true)
	c.dead.Store(int64(2), true)
	it, err := p.Get(context.Background())
	if err != nil || it.n <= 2 {
		t.Fatalf("got %v %v, want a live item", it, err)
	}
	if c.destroyed.Load() != 2 {
		t.Fatalf("destroyed %d, want the 2 dead ones", c.destroyed.Load())
	}
}

func TestPoolTryGetNeverWaits(t *testing.T) {
	c := &counter{delay: 20 * time.Millisecond}
	p := New(Config{Ready: 1, Budget: NewBudget(2)}, c.create, c.destroy, c.alive)
	defer p.Close()
	if _, ok := p.TryGet(); ok {
		t.Fatal("TryGet before anything was ready")
	}
	waitFor(t, "1 ready", func() bool { return p.Stats().Ready == 1 })
	it, ok := p.TryGet()
	if !ok {
		t.Fatal("TryGet missed a ready item")
	}
	done(p, it)
	if s := p.Stats(); s.Hits != 1 || s.Misses != 1 {
		t.Fatalf("%+v", s)
	}
}

func TestPoolCloseEndsReadyItems(t *testing.T) {
	c := &counter{}
	b := NewBudget(8)
	p := New(Config{Ready: 4, Budget: b}, c.create, c.destroy, c.alive)
	waitFor(t, "4 ready", func() bool { return p.Stats().Ready == 4 })
	p.Close()
	if c.destroyed.Load() != c.made.Load() || b.Stats().InUse != 0 {
		t.Fatalf("made %d destroyed %d, budget %+v", c.made.Load(), c.destroyed.Load(), b.Stats())
	}
	if _, err := p.Get(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestPoolCreateErrorsReachTheCaller(t *testing.T) {
	c := &counter{}
	c.fail.Store(true)
	b := NewBudget(2)
	p := New(Config{Ready: 1, Budget: b}, c.create, c.destroy, c.alive)
	defer p.Close()
	if _, err := p.Get(context.Background()); err == nil || errors.Is(err, ErrBusy) {
		t.Fatalf("want the create error, got %v", err)
	}
	if s := p.Stats(); s.InUse != 0 {
		t.Fatalf("a failed create kept capacity: %+v", s)
	}
	p.Close()
	if s := b.Stats(); s.InUse != 0 {
		t.Fatalf("a failed create kept its slot: %+v", s)
	}
}
