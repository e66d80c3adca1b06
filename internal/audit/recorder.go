package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Recorder.Flush after Close.
var ErrClosed = errors.New("audit: recorder closed")

const (
	// maxBatch bounds one transaction, so a backlog is written in steps
	// and a failing batch costs at most this many events.
	maxBatch = 256
	// gatherWindow is how long the writer waits after an event for more
	// to join its transaction: each commit is a durable write (an fsync),
	// and one per event would cost the server more CPU than the event's
	// run. An event reaches the database at most this much later.
	gatherWindow = 25 * time.Millisecond
	// defaultBuffer is used when NewRecorder is given no buffer size.
	defaultBuffer = 1024
	// writeTimeout bounds one Append, so a wedged database cannot stall
	// Flush and Close forever.
	writeTimeout = 30 * time.Second
	// minBackoff and maxBackoff space the retries while the store is
	// unreachable: short enough that the log catches up soon after it
	// returns, long enough not to hammer it while it is down.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// Recorder writes events to a Store from a background goroutine. Record
// never blocks the caller: when the buffer is full the event is dropped and
// counted, and the next successful write adds an "audit_dropped" event
// saying how many were lost, so a gap in the log is itself on record.
type Recorder struct {
	store Store
	log   *slog.Logger

	// mu orders Record against Close: Record holds it shared only around a
	// non-blocking send, and Close holds it to close events, so no send can
	// hit a closed channel.
	mu     sync.RWMutex
	closed bool
	events chan Event
	// full and closing end the writer's gather window early: a batch's
	// worth is buffered, or Close was called. During the window the writer
	// waits on them and a timer, not on events, so a Record wakes nobody.
	full    chan struct{}
	closing chan struct{}

	flushes chan chan error
	done    chan struct{}

	written     atomic.Uint64
	dropped     atomic.Uint64
	errors      atomic.Uint64
	unreported  atomic.Uint64 // dropped since the last audit_dropped record
	unavailable atomic.Bool   // the store is unreachable; the writer waits
	maxCode     atomic.Int64  // an event's code is cut beyond this (LimitCode)
	// failing is the error of the last write when it lost its events
	// (nil once a write succeeds), for readiness: see Failing.
	failing atomic.Pointer[error]
}

// NewRecorder starts a recorder that buffers up to buffer events (1024
// when buffer <= 0) in front of store. log receives store errors; nil
// discards them. The caller still owns store and closes it after Close.
func NewRecorder(store Store, buffer int, log *slog.Logger) *Recorder {
	if buffer <= 0 {
		buffer = defaultBuffer
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{
		store:   store,
		log:     log,
		events:  make(chan Event, buffer),
		full:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		flushes: make(chan chan error),
		done:    make(chan struct{}),
	}
	r.maxCode.Store(DefaultMaxCode)
	go r.run()
	return r
}

// LimitCode sets the largest code an event keeps (DefaultMaxCode until
// then): the largest the server accepts, so only what no request could
// carry is cut. It returns r.
func (r *Recorder) LimitCode(n int64) *Recorder {
	r.maxCode.Store(max(n, MaxField))
	return r
}

// Record queues ev for writing without blocking; when the buffer is full,
// or after Close, the event is dropped and counted. A zero Time is set to
// now, so the record shows when the event happened, not when it was
// written. Every field is capped first (see MaxField).
func (r *Recorder) Record(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	ev = capEvent(ev, int(r.maxCode.Load()))
	ev.ID = 0
	r.mu.RLock()
	sent := false
	if !r.closed {
		select {
		case r.events <- ev:
			sent = true
			if len(r.events) >= maxBatch-1 {
				select {
				case r.full <- struct{}{}:
				default:
				}
			}
		default:
		}
	}
	r.mu.RUnlock()
	if !sent {
		r.drop(1)
	}
}

func (r *Recorder) drop(n uint64) {
	r.dropped.Add(n)
	r.unreported.Add(n)
}

// Flush returns once every event recorded before the call has been written,
// or when ctx ends. It returns the first store error that lost events since
// the previous Flush, if any.
func (r *Recorder) Flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case r.flushes <- reply:
	case <-r.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close writes what is buffered and stops the recorder. It returns when
// that is done or ctx ends, whichever is first; in the latter case writing
// continues in the background. Later Records are dropped and counted.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.events)
		close(r.closing)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Written is the number of recorded events written to the store (the
// audit_dropped records the recorder adds are not counted).
func (r *Recorder) Written() uint64 { return r.written.Load() }

// Dropped is the number of recorded events that were not written: buffer
// full, recorder closed, or the store failed twice.
func (r *Recorder) Dropped() uint64 { return r.dropped.Load() }

// Errors is the number of failed store writes, retries included.
func (r *Recorder) Errors() uint64 { return r.errors.Load() }

// Unavailable reports whether the store is unreachable right now, so that
// events are held (and, once the buffer is full, dropped).
func (r *Recorder) Unavailable() bool { return r.unavailable.Load() }

// Buffered is the number of events waiting to be written.
func (r *Recorder) Buffered() int { return len(r.events) }

func (r *Recorder) run() {
	defer close(r.done)
	batch := make([]Event, 0, maxBatch)
	var failed error // a write that lost events since the last Flush
	for {
		select {
		case ev, ok := <-r.events:
			if !ok {
				r.write(batch) // reports drops that are still unreported
				return
			}
			batch = append(batch[:0], ev)
			// Take what arrives within the gather window, up to one batch;
			// after a close the loop above writes the rest.
			gather := time.NewTimer(gatherWindow)
			select {
			case <-gather.C:
			case <-r.full:
			case <-r.closing:
			}
			gather.Stop()
		more:
			for len(batch) < maxBatch {
				select {
				case ev, ok := <-r.events:
					if !ok {
						break more
					}
					batch = append(batch, ev)
				default:
					break more
				}
			}
			if err := r.write(batch); err != nil && failed == nil {
				failed = err
			}
			batch = batch[:0]
		case reply := <-r.flushes:
			err := r.flush(batch[:0])
			if failed != nil {
				err = failed // the earliest loss since the last Flush
			}
			failed = nil
			reply <- err
		}
	}
}

// flush writes the events queued when the flush was asked for, then any
// unreported drops. Only those events are taken: everything recorded before
// Flush was called is among them, and stopping there keeps a steady stream
// of new events from holding Flush forever.
func (r *Recorder) flush(batch []Event) error {
	var firstErr error
	note := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	// Only this goroutine receives, so the n queued events stay there.
	for n := len(r.events); n > 0; {
		batch = batch[:0]
		for n > 0 && len(batch) < maxBatch {
			batch = append(batch, <-r.events)
			n--
		}
		note(r.write(batch))
	}
	note(r.write(nil)) // drops since the last batch, if any
	return firstErr
}

// write appends batch and, when events were dropped since the last report,
// an audit_dropped event. While the store is unreachable (ErrUnavailable)
// the batch is kept and retried with backoff: new events wait in the
// buffer, and only those that find it full are dropped. Any other failure
// is retried once; then the batch is counted as dropped, to be reported by
// the next write that succeeds.
func (r *Recorder) write(batch []Event) error {
	lost := r.unreported.Swap(0)
	if len(batch) == 0 && lost == 0 {
		return nil
	}
	events := batch
	if lost > 0 {
		events = append(events, Event{
			Time:    time.Now(),
			Kind:    KindAuditDropped,
			Outcome: "dropped",
			Detail:  fmt.Sprintf("%d audit events dropped since the last audit_dropped record (buffer full, store error or recorder closed)", lost),
		})
	}
	var err error
	backoff := minBackoff
	for failures := 0; ; {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err = r.store.Append(ctx, events)
		cancel()
		if err == nil {
			r.failing.Store(nil)
			if r.unavailable.Swap(false) {
				r.log.Info("audit: the store is back; buffered events written", "events", len(batch))
			}
			r.written.Add(uint64(len(batch)))
			return nil
		}
		r.errors.Add(1)
		if errors.Is(err, ErrUnavailable) {
			if !r.unavailable.Swap(true) {
				r.log.Error("audit: the store is unreachable; holding events until it returns (those that find the buffer full are dropped and counted)", "err", err)
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		failures++
		r.log.Error("audit: writing events failed", "events", len(batch), "attempt", failures, "err", err)
		if failures == 2 {
			break
		}
	}
	r.unreported.Add(lost)
	r.drop(uint64(len(batch)))
	r.failing.Store(&err)
	return err
}

// Failing returns the error of the last write when the store refused it
// and its events were lost (a full disk, a database file deleted, a table
// that is not the log's), or nil when the last write succeeded: the log
// is not being kept, which a readiness check must say. An unreachable
// store is Unavailable instead (its events wait in the buffer).
func (r *Recorder) Failing() error {
	if p := r.failing.Load(); p != nil {
		return fmt.Errorf("the last audit write failed and its events were dropped (%d dropped so far): %w", r.dropped.Load(), *p)
	}
	return nil
}
