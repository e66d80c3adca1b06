// Package pool keeps sandboxes ready before requests arrive: a fixed
// number warm, refilled in the background, within a cap on how many exist
// at once, with a bounded wait when all are taken.
//
// The pool is generic over what it keeps; the sandbox service decides what
// a ready item is (a jailed interpreter waiting for code) and how to end it.
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
	// Max bounds ready plus in-use items; 0 means Ready + 16.
	Max int
	// QueueTimeout bounds the wait for an item when Max are in use.
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
	create  func(context.Context) (T, error)
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
}

// New starts a pool. create makes one ready item; destroy ends one that
// will not be used; alive tells whether a ready item is still usable.
func New[T any](cfg Config, create func(context.Context) (T, error), destroy func(T), alive func(T) bool) *Pool[T] {
	if cfg.Max <= 0 {
		cfg.Max = cfg.Ready + 16
	}
	if cfg.Refillers <= 0 {
		cfg.Refillers = 1
	}
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool[T]{cfg: cfg, create: create, destroy: destroy, alive: alive, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	for range cfg.Refillers {
		p.wg.Add(1)
		go p.refill()
	}
	return p
}

// broadcast wakes everyone waiting for a change; call with mu held.
func (p *Pool[T]) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool[T]) live() int { return len(p.ready) + p.inUse + p.creating }

// refill keeps cfg.Ready items waiting, while the cap allows.
func (p *Pool[T]) refill() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for !p.closed && (len(p.ready)+p.creating >= p.cfg.Ready || p.live() >= p.cfg.Max) {
			ch := p.changed
			p.mu.Unlock()
			select {
			case <-ch:
			case <-p.ctx.Done():
			}
			p.mu.Lock()
		}
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.creating++
		p.mu.Unlock()

		item, err := p.create(p.ctx)

		p.mu.Lock()
		p.creating--
		if err == nil && !p.closed {
			p.ready = append(p.ready, item)
			p.stats.Created++
		}
		p.broadcast()
		closed := p.closed
		p.mu.Unlock()
		if err == nil && closed {
			p.destroy(item)
		}
		if err != nil {
			// A host that cannot make sandboxes should not be hammered.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-p.ctx.Done():
			}
		}
	}
}

// Get takes a ready item, or makes one when none is ready and the cap
// allows, or waits up to the queue timeout. Every successful Get must be
// followed by Release once the item is finished with.
func (p *Pool[T]) Get(ctx context.Context) (T, error) {
	var zero T
	deadline := time.NewTimer(p.cfg.QueueTimeout)
	defer deadline.Stop()
	p.mu.Lock()
	p.waiting++
	defer func() {
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
	}()
	for {
		if p.closed {
			p.mu.Unlock()
			return zero, ErrClosed
		}
		for len(p.ready) > 0 {
			item := p.ready[0]
			p.ready = p.ready[1:]
			if p.alive != nil && !p.alive(item) {
				p.broadcast()
				p.mu.Unlock()
				p.destroy(item)
				p.mu.Lock()
				continue
			}
			p.inUse++
			p.stats.Hits++
			p.broadcast() // a refiller may start the next one
			p.mu.Unlock()
			return item, nil
		}
		if p.live() < p.cfg.Max {
			// Nothing ready: make one now rather than wait for a refiller.
			p.inUse++
			p.stats.Misses++
			p.broadcast()
			p.mu.Unlock()
			item, err := p.create(ctx)
			if err != nil {
				p.Release()
				return zero, err
			}
			return item, nil
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			p.mu.Lock()
			p.stats.Busy++
			p.mu.Unlock()
			return zero, ErrBusy
		case <-ctx.Done():
			return zero, ctx.Err()
		}
		p.mu.Lock()
	}
}

// Release returns the capacity of an item taken with Get; the item itself
// is the caller's to end.
func (p *Pool[T]) Release() {
	p.mu.Lock()
	p.inUse--
	p.broadcast()
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
	p.cancel()
	for _, item := range ready {
		p.destroy(item)
	}
	p.wg.Wait()
}
