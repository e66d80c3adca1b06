package errdefs

import (
	"errors"
	"time"

	"github.com/codecage/codecage/internal/access"
)

// PeerError is how a forwarded request's failure travels back: its kind
// and message, rebuilt on the way back into an error every surface
// classifies as if it had happened here.
type PeerError struct {
	Kind       string  `json:"kind"`
	Message    string  `json:"message"`
	RetryAfter float64 `json:"retry_after,omitempty"`
}

// Error is the owner's message.
func (pe *PeerError) Error() string { return pe.Message }

// PeerErrorOf describes err for the replica that forwarded the request.
func PeerErrorOf(err error) *PeerError {
	pe := &PeerError{Kind: ErrorKind(err), Message: err.Error()}
	if errors.Is(err, ErrSessionLost) {
		pe.Kind = KindSessionLost
	}
	if d := access.RetryAfter(err); d > 0 {
		pe.RetryAfter = d.Seconds()
	}
	return pe
}

// Err rebuilds the error: the owner's message, classified by its kind
// (KindError), with the two differences a forwarded failure has.
func (pe *PeerError) Err() error {
	base := KindError(pe.Kind)
	switch pe.Kind {
	case KindRateLimited:
		base = &access.DeniedError{Err: access.ErrRateLimited, Msg: pe.Message, RetryAfter: time.Duration(pe.RetryAfter * float64(time.Second))}
	case KindShuttingDown:
		// The owner is stopping: its sessions go with it.
		base = ErrSessionLost
	}
	return &remoteError{msg: pe.Message, err: base}
}

// remoteError is a failure the owner reported (and audited): its message
// as the owner wrote it, its kind through Unwrap (IsRemote).
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// IsRemote reports whether err is a failure another replica reported
// (PeerError.Err): that replica audited it already.
func IsRemote(err error) bool {
	var re *remoteError
	return errors.As(err, &re)
}
