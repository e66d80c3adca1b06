package pool

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Budget is the one count of sandboxes that may exist at once, shared by
// every pool and by every sandbox started outside a pool. A [Slot] is one
// unit of it; whoever holds a slot holds a sandbox (or is starting one),
// and releases the slot once that sandbox is gone.
//
// When the budget is spent, callers queue in order. Sandboxes that only
// wait in a pool are capacity nobody uses: a queued caller makes the pools
// give one up (the one waiting longest is not tracked; any idle one will
// do) rather than wait for a run to end.
type Budget struct {
	mu         sync.Mutex
	max        int
	used       int
	queue      []*ticket
	reclaimers []*func() bool
	changed    chan struct{} // closed and replaced when a slot is freed for anyone
	busy       int64
	granted    int64
}

// BudgetStats is a snapshot of a budget.
type BudgetStats struct {
	// Max is the size of the budget; InUse the slots held (sandboxes
	// running, starting or waiting ready in a pool); Waiting the callers
	// queued for a slot.
	Max, InUse, Waiting int
	// Acquired counts slots handed out; Busy counts callers that gave up
	// waiting (the queue timeout).
	Acquired, Busy int64
}

// ticket is one caller's place in the queue.
type ticket struct {
	ready   chan struct{} // closed when granted
	granted bool          // under the budget's mu
}

// NewBudget returns a budget of n slots (at least one).
func NewBudget(n int) *Budget {
	return &Budget{max: max(n, 1), changed: make(chan struct{})}
}

// Slot is one sandbox's share of a [Budget]. Release is idempotent.
type Slot struct {
	b    *Budget
	once sync.Once
}

// Release gives the slot back: to the first caller in the queue, if any.
func (s *Slot) Release() {
	if s == nil {
		return
	}
	s.once.Do(s.b.release)
}

// TryAcquire takes a free slot, or returns nil when none is free or
// callers are queued (they come first: refills must not overtake them).
func (b *Budget) TryAcquire() *Slot {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used >= b.max || len(b.queue) > 0 {
		return nil
	}
	b.used++
	b.granted++
	return &Slot{b: b}
}

// Acquire takes a slot, queuing up to wait (or until ctx ends) when the
// budget is spent; it returns [ErrBusy] when the wait runs out.
func (b *Budget) Acquire(ctx context.Context, wait time.Duration) (*Slot, error) {
	t := b.enqueue()
	if t == nil {
		return &Slot{b: b}, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-t.ready:
		return &Slot{b: b}, nil
	case <-timer.C:
		if b.cancel(t) {
			return &Slot{b: b}, nil // granted as the wait ran out
		}
		b.mu.Lock()
		b.busy++
		b.mu.Unlock()
		return nil, ErrBusy
	case <-ctx.Done():
		if b.cancel(t) {
			(&Slot{b: b}).Release()
		}
		return nil, ctx.Err()
	}
}

// enqueue takes a free slot at once (nil ticket) or queues a ticket, and
// asks the pools to give up an idle sandbox for it.
func (b *Budget) enqueue() *ticket {
	b.mu.Lock()
	if b.used < b.max && len(b.queue) == 0 {
		b.used++
		b.granted++
		b.mu.Unlock()
		return nil
	}
	t := &ticket{ready: make(chan struct{})}
	b.queue = append(b.queue, t)
	reclaimers := b.reclaimers
	b.mu.Unlock()
	for _, r := range reclaimers {
		if (*r)() {
			break
		}
	}
	return t
}

// cancel takes t out of the queue; it reports whether t had been granted
// meanwhile (the caller then holds the slot).
func (b *Budget) cancel(t *ticket) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.granted {
		return true
	}
	for i, q := range b.queue {
		if q == t {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			break
		}
	}
	return false
}

func (b *Budget) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		// Handed over: the slot stays used, by its next holder.
		t := b.queue[0]
		b.queue = b.queue[1:]
		t.granted = true
		b.granted++
		close(t.ready)
		return
	}
	b.used--
	close(b.changed)
	b.changed = make(chan struct{})
}

// freed returns a channel closed the next time a slot is freed with no
// one queued for it (refills wait on it).
func (b *Budget) freed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// onReclaim registers a function that ends one idle sandbox, releasing
// its slot, and reports whether it had one to end; the function it
// returns unregisters it (a pool closed while the budget lives on).
func (b *Budget) onReclaim(f func() bool) (remove func()) {
	r := &f
	b.mu.Lock()
	b.reclaimers = append(b.reclaimers, r)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		// A copy: enqueue may be walking the old slice outside the lock.
		b.reclaimers = slices.DeleteFunc(slices.Clone(b.reclaimers), func(x *func() bool) bool { return x == r })
	}
}

// Stats returns a snapshot.
func (b *Budget) Stats() BudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetStats{Max: b.max, InUse: b.used, Waiting: len(b.queue), Acquired: b.granted, Busy: b.busy}
}
