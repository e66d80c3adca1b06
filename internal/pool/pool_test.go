package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// counter makes numbered items and records which were destroyed.
type counter struct {
	made, destroyed atomic.Int64
	delay           time.Duration
	fail            atomic.Bool
	dead            sync.Map
}

func (c *counter) create(ctx context.Context) (int64, error) {
	if c.fail.Load() {
		return 0, errors.New("cannot make one")
	}
	time.Sleep(c.delay)
	return c.made.Add(1), nil
}

func (c *counter) destroy(int64) { c.destroyed.Add(1) }

func (c *counter) alive(i int64) bool { _, dead := c.dead.Load(i); return !dead }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestPoolFillsAndRefillsAfterABurst(t *testing.T) {
	c := &counter{delay: 2 * time.Millisecond}
	p := New(Config{Ready: 3, Max: 10, Refillers: 2}, c.create, c.destroy, c.alive)
	defer p.Close()
	waitFor(t, "3 ready", func() bool { return p.Stats().Ready == 3 })
	var got []int64
	for range 6 { // a burst larger than the pool
		item, err := p.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, item)
	}
	s := p.Stats()
	if s.InUse != 6 || s.Hits < 3 {
		t.Fatalf("after burst: %+v", s)
	}
	for range got {
		p.Release()
	}
	waitFor(t, "refill to 3", func() bool { return p.Stats().Ready == 3 })
}

func TestPoolIsBoundedAndSaysBusy(t *testing.T) {
	c := &counter{}
	p := New(Config{Ready: 1, Max: 2, QueueTimeout: 50 * time.Millisecond}, c.create, c.destroy, c.alive)
	defer p.Close()
	a, _ := p.Get(context.Background())
	b, _ := p.Get(context.Background())
	if a == 0 || b == 0 {
		t.Fatal("no items")
	}
	start := time.Now()
	if _, err := p.Get(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("want ErrBusy, got %v", err)
	}
	if time.Since(start) < 40*time.Millisecond {
		t.Fatal("did not wait for the queue timeout")
	}
	// A release lets a waiter through.
	done := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background())
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	p.Release()
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if s := p.Stats(); s.Busy != 1 || s.InUse+s.Ready+s.Creating > 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPoolDropsDeadItems(t *testing.T) {
	c := &counter{}
	p := New(Config{Ready: 2, Max: 4}, c.create, c.destroy, c.alive)
	defer p.Close()
	waitFor(t, "2 ready", func() bool { return p.Stats().Ready == 2 })
	c.dead.Store(int64(1), true)
	c.dead.Store(int64(2), true)
	item, err := p.Get(context.Background())
	if err != nil || item <= 2 {
		t.Fatalf("got %d %v, want a live item", item, err)
	}
	if c.destroyed.Load() != 2 {
		t.Fatalf("destroyed %d, want the 2 dead ones", c.destroyed.Load())
	}
}

func TestPoolCloseEndsReadyItems(t *testing.T) {
	c := &counter{}
	p := New(Config{Ready: 4}, c.create, c.destroy, c.alive)
	waitFor(t, "4 ready", func() bool { return p.Stats().Ready == 4 })
	p.Close()
	if c.destroyed.Load() != c.made.Load() {
		t.Fatalf("made %d destroyed %d", c.made.Load(), c.destroyed.Load())
	}
	if _, err := p.Get(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestPoolCreateErrorsReachTheCaller(t *testing.T) {
	c := &counter{}
	c.fail.Store(true)
	p := New(Config{Ready: 1, Max: 2}, c.create, c.destroy, c.alive)
	defer p.Close()
	if _, err := p.Get(context.Background()); err == nil || errors.Is(err, ErrBusy) {
		t.Fatalf("want the create error, got %v", err)
	}
	if s := p.Stats(); s.InUse != 0 {
		t.Fatalf("a failed create kept capacity: %+v", s)
	}
}
