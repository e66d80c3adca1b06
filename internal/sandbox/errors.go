package sandbox

import (
	"context"
	"errors"

	"github.com/codecage/codecage/internal/access"
)

// ErrShuttingDown: the service is stopping and takes no new work.
var ErrShuttingDown = errors.New("shutting down")

// Error kinds, the stable names every surface reports a failure by (REST
// problem types, MCP error prefixes, metrics and the audit log).
const (
	KindInvalidRequest  = "invalid_request"
	KindBadPath         = "bad_path"
	KindFileNotFound    = "file_not_found"
	KindTooLarge        = "too_large"
	KindSessionNotFound = "session_not_found"
	KindSessionEnded    = "session_ended"
	// KindSessionLost (cluster.go): the replica holding it is gone.
	KindTooManySessions = "too_many_sessions"
	KindRateLimited     = "rate_limited"
	KindBusy            = "busy"
	KindUnavailable     = "unavailable"
	KindShuttingDown    = "shutting_down"
	KindCanceled        = "canceled"
	KindInternal        = "internal"
)

// ErrorKind names the kind of a service error: the one place where the
// service's sentinel errors are classified.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrInvalidRequest):
		return KindInvalidRequest
	case errors.Is(err, ErrBadPath):
		return KindBadPath
	case errors.Is(err, ErrFileNotFound):
		return KindFileNotFound
	case errors.Is(err, ErrTooLarge):
		return KindTooLarge
	case errors.Is(err, ErrSessionLost):
		return KindSessionLost
	case errors.Is(err, ErrSessionNotFound):
		return KindSessionNotFound
	case errors.Is(err, ErrSessionEnded):
		return KindSessionEnded
	case errors.Is(err, ErrTooManySessions):
		return KindTooManySessions
	case errors.Is(err, access.ErrRateLimited), errors.Is(err, access.ErrKeyConcurrency):
		return KindRateLimited
	case errors.Is(err, ErrBusy), errors.Is(err, access.ErrQueueFull):
		return KindBusy
	case errors.Is(err, ErrShuttingDown):
		return KindShuttingDown
	case errors.Is(err, ErrUnavailable):
		return KindUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return KindCanceled
	}
	return KindInternal
}
