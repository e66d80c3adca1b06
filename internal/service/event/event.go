// Package event holds what the service reports and who it reports for:
// the Event every request produces for metrics and the audit log, its
// Observer, and the Caller a request carries. It is a leaf the service's
// domains and its root share.
package event

import "time"

// Event kinds.
const (
	EventExecute  = "execute"
	EventValidate = "validate"
	EventSession  = "session"
	EventFile     = "file"
	EventDenied   = "denied"
	EventSecret   = "secret"
)

// Bounds on what one run's events repeat of what its code chose.
const (
	// MaxName bounds a name the code chose (a tool, a module) as the
	// server repeats it (to the code, in the audit log, in metrics): a
	// real one is short, and the code may send megabytes.
	MaxName = 256
	// MaxRefusedPerRun bounds the records one run leaves of one kind of
	// refusal (calls over the tool budget, hosts the egress proxy
	// refused); the rest are summed up in one.
	MaxRefusedPerRun = 32
)

// Event is one thing the service did or refused, for metrics and the audit
// log. Every surface's requests produce the same events.
type Event struct {
	Time        time.Time
	Kind        string // one of the Event constants
	Action      string // within the kind: "create", "close", "write", ...
	ExecutionID string
	Caller      Caller
	Profile     string
	// Backend is what ran the code ("native", "gvisor"); "" when nothing ran.
	Backend string
	// Code is the code, command or package concerned ("" when none).
	Code string
	// Outcome is "success", "error" (the code failed), a limit ("timeout",
	// "memory", "cpu", "output", "canceled"), "crash", or for a request
	// that could not run, the error kind (errdefs.ErrorKind).
	Outcome        string
	Duration       time.Duration
	Limit          string
	SecurityEvents []string
	Detail         string
}

// Observer receives the service's events. Observe must not block: it runs
// on the request's goroutine.
type Observer interface {
	Observe(Event)
}

// Observers fans one event out to several observers.
type Observers []Observer

// Observe passes ev to each observer.
func (o Observers) Observe(ev Event) {
	for _, x := range o {
		x.Observe(ev)
	}
}
