// Package pool keeps sandboxes ready before requests arrive, within one
// [Budget] of sandboxes that every pool and every other sandbox shares: a
// number warm per pool, refilled in the background from free capacity
// only, with a bounded, ordered wait when the budget is spent.
//
// The pool is generic over what it keeps and knows nothing of jails: its
// owner (the fleet) decides what a ready item is and how to end one. An
// item holds its [Slot] from creation to its end; the pool releases the
// slot of a create that failed, and the item's own end releases the rest.
package pool

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBusy means no sandbox could be had within the queue timeout.
var ErrBusy = errors.New("pool: all sandboxes are busy")

// ErrClosed means the pool was closed.
var ErrClosed = errors.New("pool: closed")

// Config sizes a pool.
type Config struct {
	// Ready is how many items the pool keeps waiting.
	Ready int
	// Budget bounds the items of this pool together with everything else
	// that shares it; nil gives the pool a budget of its own of Ready + 16.
	Budget *Budget
	// QueueTimeout bounds the wait for an item when the budget is spent.
	QueueTimeout time.Duration
	// Refillers is how many items are made at once in the background.
	Refillers int
}

// Stats is a snapshot of the pool.
type Stats struct {
	Ready, InUse, Creating, Waiting int
	Created, Hits, Misses, Busy     int64
}

// Pool keeps items of type T ready.
type Pool[T any] struct {
	cfg     Config
	create  func(context.Context, *Slot) (T, error)
	destroy func(T)
	alive   func(T) bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	ready    []T
	inUse    int
	creating int
	waiting  int
	stats    Stats
	changed  chan struct{} // closed and replaced whenever the state moves
	closed   bool
	// unreclaim takes the pool off its budget's reclaimers, at Close.
	unreclaim func()
}

// New starts a pool. create makes one ready item holding slot (on error the
// pool releases the slot); destroy ends an item that will not be used and
// must release its slot; alive tells whether a ready item is still usable.
func New[T any](cfg Config, create func(context.Context, *Slot) (T, error), destroy func(T), alive func(T) bool) *Pool[T] {
	if cfg.Budget == nil {
		cfg.Budget = NewBudget(cfg.Ready + 16)
	}
	if cfg.Refillers <= 0 {
		cfg.Refillers = 1
	}
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool[T]{cfg: cfg, create: create, destroy: destroy, alive: alive, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	p.unreclaim = cfg.Budget.onReclaim(p.reclaim)
	for range cfg.Refillers {
		p.wg.Add(1)
		go p.refill()
	}
	return p
}

// broadcast wakes everyone waiting for a change of ready or creating
// (callers for an item, refillers for room); call with mu held.
func (p *Pool[T]) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// refill keeps cfg.Ready items waiting, from slots nobody else wants.
func (p *Pool[T]) refill() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		var slot *Slot
		for !p.closed {
			// A full pool waits for a take; one short of a slot also for
			// a slot to be freed (not every freed slot: wakeups are CPU).
			var freed <-chan struct{}
			if len(p.ready)+p.creating < p.cfg.Ready {
				if slot = p.cfg.Budget.TryAcquire(); slot != nil {
					break
				}
				freed = p.cfg.Budget.freed()
			}
			changed := p.changed
			p.mu.Unlock()
			select {
			case <-changed:
			case <-freed:
			case <-p.ctx.Done():
			}
			p.mu.Lock()
		}
		if p.closed {
			p.mu.Unlock()
			slot.Release()
			return
		}
		p.creating++
		p.mu.Unlock()

		item, err := p.create(p.ctx, slot)

		p.mu.Lock()
		p.creating--
		if err == nil && !p.closed {
			p.ready = append(p.ready, item)
			p.stats.Created++
		}
		p.broadcast()
		closed := p.closed
		p.mu.Unlock()
		if err != nil {
			slot.Release()
			// A host that cannot make sandboxes should not be hammered.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-p.ctx.Done():
			}
		} else if closed {
			p.destroy(item)
		}
	}
}

// take pops a ready, live item; call with mu held (it may drop and retake
// it to end dead items).
func (p *Pool[T]) take() (T, bool) {
	for len(p.ready) > 0 {
		item := p.ready[0]
		p.ready = p.ready[1:]
		p.broadcast() // a refiller may start the next one
		if p.alive != nil && !p.alive(item) {
			p.mu.Unlock()
			p.destroy(item)
			p.mu.Lock()
			continue
		}
		return item, true
	}
	var zero T
	return zero, false
}

// TryGet takes a ready item without waiting, or reports false (a miss).
// A successful TryGet is followed by Release once the item is used up.
func (p *Pool[T]) TryGet() (T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		var zero T
		return zero, false
	}
	item, ok := p.take()
	if ok {
		p.inUse++
		p.stats.Hits++
	} else {
		p.stats.Misses++
	}
	return item, ok
}

// Get takes a ready item, or makes one when none is ready and the budget
// has room, or waits in the budget's queue up to the queue timeout. Every
// successful Get must be followed by Release once the item is used up.
func (p *Pool[T]) Get(ctx context.Context) (T, error) {
	var zero T
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return zero, ErrClosed
	}
	if item, ok := p.take(); ok {
		p.inUse++
		p.stats.Hits++
		p.mu.Unlock()
		return item, nil
	}
	if slot := p.cfg.Budget.TryAcquire(); slot != nil {
		// Room in the budget and nobody queued: make one now.
		p.inUse++
		p.stats.Misses++
		p.mu.Unlock()
		return p.made(ctx, slot)
	}
	p.waiting++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
	}()
	return p.await(ctx)
}

// await is Get with nothing ready: it makes an item as soon as the budget
// has room, unless a refill lands first.
func (p *Pool[T]) await(ctx context.Context) (T, error) {
	var zero T
	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	got := make(chan *Slot, 1)
	failed := make(chan error, 1)
	go func() {
		slot, err := p.cfg.Budget.Acquire(waitCtx, p.cfg.QueueTimeout)
		if err != nil {
			failed <- err
			return
		}
		got <- slot
	}()
	for {
		p.mu.Lock()
		changed := p.changed
		p.mu.Unlock()
		select {
		case slot := <-got:
			p.mu.Lock()
			p.inUse++
			p.stats.Misses++
			p.mu.Unlock()
			return p.made(ctx, slot)
		case err := <-failed:
			if errors.Is(err, ErrBusy) {
				p.mu.Lock()
				p.stats.Busy++
				p.mu.Unlock()
			}
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			return zero, err
		case <-changed:
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				stop()
				abandonAcquire(got, failed)
				return zero, ErrClosed
			}
			if item, ok := p.take(); ok {
				p.inUse++
				p.stats.Hits++
				p.mu.Unlock()
				stop()
				abandonAcquire(got, failed)
				return item, nil
			}
			p.mu.Unlock()
		}
	}
}

// abandonAcquire waits for a stopped Acquire to end; a slot that came
// meanwhile is not ours to keep, so it goes back to the budget.
func abandonAcquire(got <-chan *Slot, failed <-chan error) {
	select {
	case slot := <-got:
		slot.Release()
	case <-failed:
	}
}

// made creates an item for a caller that counted it in use, holding slot.
func (p *Pool[T]) made(ctx context.Context, slot *Slot) (T, error) {
	item, err := p.create(ctx, slot)
	if err != nil {
		slot.Release()
		p.Release()
		var zero T
		return zero, err
	}
	return item, nil
}

// reclaim ends one ready item to give its slot to a caller queued on the
// budget; it reports whether there was one.
func (p *Pool[T]) reclaim() bool {
	p.mu.Lock()
	if p.closed || len(p.ready) == 0 {
		p.mu.Unlock()
		return false
	}
	item := p.ready[len(p.ready)-1] // the youngest: the others are warmer
	p.ready = p.ready[:len(p.ready)-1]
	p.broadcast()
	p.mu.Unlock()
	go p.destroy(item) // its slot comes back once it is gone
	return true
}

// Release returns the in-use count of an item taken with Get; ending the
// item (and releasing its slot) is its holder's business.
func (p *Pool[T]) Release() {
	p.mu.Lock()
	p.inUse-- // a count only: nobody waits for it (the budget has the slots)
	p.mu.Unlock()
}

// Stats returns a snapshot.
func (p *Pool[T]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Ready, s.InUse, s.Creating, s.Waiting = len(p.ready), p.inUse, p.creating, p.waiting
	return s
}

// Close stops refilling, ends every ready item and waits for the refillers.
// Items in use are their holders' to end.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.broadcast()
	p.mu.Unlock()
	p.unreclaim()
	p.cancel()
	for _, item := range ready {
		p.destroy(item)
	}
	p.wg.Wait()
}
