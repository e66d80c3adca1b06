package service

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// cancelBound is how long Shutdown waits for the requests it cancelled.
const cancelBound = 10 * time.Second

// drain tracks the requests in progress so that Shutdown can wait for
// them, and cancels them when the wait runs out.
type drain struct {
	mu      sync.Mutex
	closing bool
	running sync.WaitGroup
	base    context.Context // canceled when Shutdown gives up waiting
	cancel  context.CancelFunc
}

func (d *drain) init() { d.base, d.cancel = context.WithCancel(context.Background()) }

// admit lets a request in, unless the service is shutting down or the
// caller's limits refuse it. A request that runs a sandbox (heavy) takes
// a concurrency slot; others spend a rate token only. A call an admitted
// request makes for itself is admitted within it instead (admitted.go).
// release must be called when the request ends.
func (s *Service) admit(ctx context.Context, heavy bool) (release func(), err error) {
	if release, ok, err := admitWithin(ctx); ok {
		return release, err
	}
	s.drain.mu.Lock()
	if s.drain.closing {
		s.drain.mu.Unlock()
		return nil, fmt.Errorf("%w: the server is stopping and takes no new requests", ErrShuttingDown)
	}
	s.drain.running.Add(1)
	s.drain.mu.Unlock()
	c, ok := CallerFrom(ctx)
	if !ok {
		return s.drain.running.Done, nil
	}
	if !heavy {
		if err := s.gate.Allow(c.Key); err != nil {
			s.drain.running.Done()
			return nil, err
		}
		return s.drain.running.Done, nil
	}
	rel, err := s.gate.Acquire(ctx, c.Key)
	if err != nil {
		s.drain.running.Done()
		return nil, err
	}
	return func() {
		rel()
		s.drain.running.Done()
	}, nil
}

// spawn runs f on a goroutine of its own that Shutdown waits for, as for
// a request in progress (a process's run, which outlives the request that
// started it); it refuses once the service is stopping.
func (s *Service) spawn(f func()) error {
	s.drain.mu.Lock()
	defer s.drain.mu.Unlock()
	if s.drain.closing {
		return fmt.Errorf("%w: the server is stopping and takes no new requests", ErrShuttingDown)
	}
	s.drain.running.Add(1)
	go func() {
		defer s.drain.running.Done()
		f()
	}()
	return nil
}

// bind returns ctx, also canceled when Shutdown stops waiting.
func (s *Service) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.drain.base, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// Shutdown stops taking requests, waits for those in progress until ctx
// ends, then cancels what still runs (their sandboxes are killed and their
// results say so), waits for those to end (at most cancelBound), parks
// the sessions (within a bound of its own) and closes the service. It
// returns ctx's error when it had to cancel.
func (s *Service) Shutdown(ctx context.Context) error {
	s.drain.mu.Lock()
	s.drain.closing = true
	s.drain.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.drain.running.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.drain.cancel()
		// Cancelled requests end at once, and the surfaces cut what
		// waits on a client (bodies at the grace, connections soon
		// after); one still running past this bound does not hold the
		// drain: its sandbox goes with the rest.
		select {
		case <-done:
		case <-time.After(cancelBound):
			s.log().Warn("requests still running after they were canceled: the server stops without them", "waited", cancelBound.String())
		}
	}
	if s.cfg.ParkOnShutdown {
		// The requests have ended: every session is written out whole, so
		// that a restart, or another replica, resumes it. This has its
		// own bound (the grace again), after the requests'.
		pctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
		s.persist.ParkAll(pctx)
		cancel()
	}
	s.Close()
	return err
}

// Running is the number of requests in progress; Waiting the number queued
// for a concurrency slot.
func (s *Service) Running() int { return s.gate.Running() }

// Waiting is the number of requests queued for a global concurrency slot.
func (s *Service) Waiting() int { return s.gate.Waiting() }
