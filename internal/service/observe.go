package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/codecage/codecage/internal/service/event"
)

// Events and their observers live in the event leaf; these names keep
// the surfaces' spelling.
const (
	EventExecute  = event.EventExecute
	EventValidate = event.EventValidate
	EventSession  = event.EventSession
	EventFile     = event.EventFile
	EventDenied   = event.EventDenied
	EventSecret   = event.EventSecret
)

type (
	// Event is event.Event.
	Event = event.Event
	// Observer is event.Observer.
	Observer = event.Observer
	// Observers is event.Observers.
	Observers = event.Observers
)

// SetObserver replaces who receives the service's events (nil: nobody).
// Unlike the other [Options] it is safe while the service runs, since the
// server's metrics observe a service that must exist first.
func (s *Service) SetObserver(o Observer) {
	s.obsMu.Lock()
	s.observer = o
	s.obsMu.Unlock()
}

func (s *Service) emit(ctx context.Context, ev Event) {
	s.obsMu.RLock()
	o := s.observer
	s.obsMu.RUnlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if c, ok := CallerFrom(ctx); ok {
		ev.Caller = c
		if c.Trace != nil && ev.ExecutionID != "" {
			c.Trace.ExecutionID = ev.ExecutionID
		}
	}
	if o != nil {
		o.Observe(ev)
	}
}

// emitFailure reports a request that could not run.
func (s *Service) emitFailure(ctx context.Context, kind, action, profile, code string, err error, start time.Time) {
	s.emit(ctx, failureEvent(kind, action, profile, code, err, start))
}

// failureEvent is the event of a request that could not run.
func failureEvent(kind, action, profile, code string, err error, start time.Time) Event {
	return Event{Kind: kind, Action: action, Profile: profile, Code: code, Outcome: ErrorKind(err),
		Duration: time.Since(start), Detail: err.Error()}
}

// HashCode is the audit log's fingerprint of code: SHA-256, hex.
func HashCode(code string) string {
	h := sha256.Sum256([]byte(code))
	return hex.EncodeToString(h[:])
}

// Report records an event a surface observed itself, such as a request it
// refused before calling the service (a missing API key).
func (s *Service) Report(ctx context.Context, ev Event) { s.emit(ctx, ev) }
