package access

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Reasons a request is turned away; errors.Is tells them apart.
var (
	// ErrRateLimited: the key spent its token bucket; retry after the
	// error's RetryAfter.
	ErrRateLimited = errors.New("rate limited")
	// ErrKeyConcurrency: the key already has its maximum of requests
	// running.
	ErrKeyConcurrency = errors.New("too many concurrent requests for this key")
	// ErrQueueFull: every global slot is taken and the queue is full, or
	// the wait for a slot ran out.
	ErrQueueFull = errors.New("server busy")
)

// DeniedError is a refusal with the wait that would have helped.
type DeniedError struct {
	Err        error // one of the sentinels above
	Msg        string
	RetryAfter time.Duration
}

func (e *DeniedError) Error() string { return e.Msg }

// Unwrap returns the sentinel.
func (e *DeniedError) Unwrap() error { return e.Err }

// RetryAfter returns how long the caller should wait before retrying a
// refused request, rounded up to whole seconds (at least 1), or 0 when
// err is no refusal.
func RetryAfter(err error) time.Duration {
	var d *DeniedError
	if !errors.As(err, &d) {
		return 0
	}
	return max(time.Second, time.Duration(math.Ceil(d.RetryAfter.Seconds()))*time.Second)
}

// Limits configure a Gate. Zero fields switch that limit off.
type Limits struct {
	Rate         float64       // requests per second per key (token refill)
	Burst        int           // token bucket size per key
	PerKey       int           // requests running at once per key
	Global       int           // requests running at once in all
	Queue        int           // requests that may wait for a global slot
	QueueTimeout time.Duration // longest wait for a global slot
}

// Gate admits requests: a token bucket and a concurrency cap per key, then
// a global concurrency cap with a bounded queue.
type Gate struct {
	lim     Limits
	mu      sync.Mutex
	keys    map[string]*keyState
	global  chan struct{}
	waiting atomic.Int64
}

type keyState struct {
	bucket  *rate.Limiter
	running int
}

// NewGate returns a gate with these limits.
func NewGate(l Limits) *Gate {
	g := &Gate{lim: l, keys: map[string]*keyState{}}
	if l.Global > 0 {
		g.global = make(chan struct{}, l.Global)
	}
	return g
}

// Waiting is the number of requests queued for a global slot.
func (g *Gate) Waiting() int { return int(g.waiting.Load()) }

// Running is the number of admitted requests not yet released.
func (g *Gate) Running() int { return len(g.global) }

func (g *Gate) state(key string) *keyState {
	st := g.keys[key]
	if st == nil {
		st = &keyState{}
		if g.lim.Rate > 0 {
			st.bucket = rate.NewLimiter(rate.Limit(g.lim.Rate), max(1, g.lim.Burst))
		}
		g.keys[key] = st
	}
	return st
}

// Allow spends one token of key's bucket, or says how long until one.
func (g *Gate) Allow(key string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allowLocked(key)
}

func (g *Gate) allowLocked(key string) error {
	st := g.state(key)
	if st.bucket == nil {
		return nil
	}
	r := st.bucket.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel() // a refused request spends nothing
		return &DeniedError{Err: ErrRateLimited, RetryAfter: d,
			Msg: fmt.Sprintf("rate limit of %g requests per second (burst %d) reached; retry in %s", g.lim.Rate, g.lim.Burst, d.Round(time.Millisecond))}
	}
	return nil
}

// Acquire admits one running request for key: it spends a token, takes
// one of the key's concurrency slots, then waits (bounded) for a global
// slot. release must be called once the request ends.
func (g *Gate) Acquire(ctx context.Context, key string) (release func(), err error) {
	g.mu.Lock()
	if err := g.allowLocked(key); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	st := g.state(key)
	if g.lim.PerKey > 0 && st.running >= g.lim.PerKey {
		g.mu.Unlock()
		return nil, &DeniedError{Err: ErrKeyConcurrency, RetryAfter: time.Second,
			Msg: fmt.Sprintf("this key already has %d requests running (its limit); wait for one to finish", g.lim.PerKey)}
	}
	st.running++
	g.mu.Unlock()
	dropKey := func() {
		g.mu.Lock()
		st.running--
		g.mu.Unlock()
	}
	if g.global == nil {
		return sync.OnceFunc(dropKey), nil
	}
	select {
	case g.global <- struct{}{}:
	default:
		if g.waiting.Add(1) > int64(g.lim.Queue) {
			g.waiting.Add(-1)
			dropKey()
			return nil, &DeniedError{Err: ErrQueueFull, RetryAfter: time.Second,
				Msg: fmt.Sprintf("server busy: %d requests running and %d queued (the limits)", g.lim.Global, g.lim.Queue)}
		}
		timer := time.NewTimer(g.lim.QueueTimeout)
		defer timer.Stop()
		select {
		case g.global <- struct{}{}:
			g.waiting.Add(-1)
		case <-timer.C:
			g.waiting.Add(-1)
			dropKey()
			return nil, &DeniedError{Err: ErrQueueFull, RetryAfter: time.Second,
				Msg: fmt.Sprintf("server busy: no slot freed within %s", g.lim.QueueTimeout)}
		case <-ctx.Done():
			g.waiting.Add(-1)
			dropKey()
			return nil, ctx.Err()
		}
	}
	return sync.OnceFunc(func() {
		<-g.global
		dropKey()
	}), nil
}
