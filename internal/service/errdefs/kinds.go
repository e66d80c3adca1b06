package errdefs

import (
	"context"
	"errors"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/envstore"
)

// Error kinds, the stable names every surface reports a failure by (REST
// problem types, MCP error prefixes, metrics and the audit log).
const (
	KindInvalidRequest = "invalid_request"
	KindBadPath        = "bad_path"
	// KindPermissionDenied: a change to what the sandbox has read-only.
	KindPermissionDenied = "permission_denied"
	KindFileNotFound     = "file_not_found"
	KindTooLarge         = "too_large"
	KindSessionNotFound  = "session_not_found"
	KindSessionEnded     = "session_ended"
	// KindSessionLost: the replica holding it is gone.
	KindSessionLost = "session_lost"
	// KindSessionGone: the session was closed, or reached its end of
	// life, under the request (E2B's "the sandbox was killed").
	KindSessionGone = "session_gone"
	// KindNotFound: a process or code context the session does not have.
	KindNotFound        = "not_found"
	KindTooManySessions = "too_many_sessions"
	// KindKeyLimit: the caller's API key holds its share of the server
	// (sessions or watches); others' keys still have theirs.
	KindKeyLimit = "key_limit"
	// KindSessionPaused: the session is paused and the request does not
	// resume it.
	KindSessionPaused    = "session_paused"
	KindSnapshotNotFound = "snapshot_not_found"
	// KindEnvironmentNotFound: a run or session names an environment
	// the operator has not built.
	KindEnvironmentNotFound = "environment_not_found"
	// KindSnapshotUnusable: altered, or made by another gVisor build.
	KindSnapshotUnusable = "snapshot_unusable"
	// KindPortClosed: nothing listens on the asked port in the session.
	KindPortClosed = "port_closed"
	// KindForbidden: an operator's operation asked by a caller who is not one.
	KindForbidden = "forbidden"
	// Environments (environments.go): the name is taken (or being
	// built), a build that failed.
	KindEnvironmentExists = "environment_exists"
	KindBuildFailed       = "build_failed"

	KindRateLimited  = "rate_limited"
	KindBusy         = "busy"
	KindUnavailable  = "unavailable"
	KindShuttingDown = "shutting_down"
	KindCanceled     = "canceled"
	KindInternal     = "internal"
)

// ErrorKind names the kind of a service error: the one place where the
// service's sentinel errors are classified.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrInvalidRequest):
		return KindInvalidRequest
	case errors.Is(err, ErrPermission):
		return KindPermissionDenied
	case errors.Is(err, ErrBadPath):
		return KindBadPath
	case errors.Is(err, ErrFileNotFound):
		return KindFileNotFound
	case errors.Is(err, ErrTooLarge):
		return KindTooLarge
	case errors.Is(err, ErrSessionLost):
		return KindSessionLost
	case errors.Is(err, ErrSessionGone):
		return KindSessionGone
	case errors.Is(err, ErrNotFound):
		return KindNotFound
	case errors.Is(err, ErrSessionNotFound):
		return KindSessionNotFound
	case errors.Is(err, ErrSessionEnded):
		return KindSessionEnded
	case errors.Is(err, ErrTooManySessions):
		return KindTooManySessions
	case errors.Is(err, ErrKeyLimit):
		return KindKeyLimit
	case errors.Is(err, ErrSessionPaused):
		return KindSessionPaused
	case errors.Is(err, ErrSnapshotNotFound):
		return KindSnapshotNotFound
	case errors.Is(err, ErrEnvironmentNotFound), errors.Is(err, envstore.ErrNotFound):
		return KindEnvironmentNotFound
	case errors.Is(err, ErrSnapshotUnusable):
		return KindSnapshotUnusable
	case errors.Is(err, ErrPortClosed):
		return KindPortClosed
	case errors.Is(err, ErrForbidden):
		return KindForbidden
	case errors.Is(err, envstore.ErrNotFound):
		return KindEnvironmentNotFound
	case errors.Is(err, envstore.ErrExists):
		return KindEnvironmentExists
	case errors.Is(err, envstore.ErrBadName):
		return KindInvalidRequest
	case errors.Is(err, ErrBuildFailed), errors.Is(err, envstore.ErrBadImage):
		return KindBuildFailed
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

// Kinds lists every error kind ErrorKind returns, for the surfaces' tables
// (a test there fails on a kind a transport has no answer for).
var Kinds = []string{
	KindInvalidRequest, KindBadPath, KindPermissionDenied, KindFileNotFound, KindTooLarge,
	KindSessionNotFound, KindSessionEnded, KindSessionLost, KindTooManySessions, KindKeyLimit,
	KindSessionPaused, KindSnapshotNotFound, KindSnapshotUnusable, KindPortClosed,
	KindForbidden, KindEnvironmentNotFound, KindEnvironmentExists, KindBuildFailed,
	KindRateLimited, KindBusy, KindUnavailable, KindShuttingDown, KindCanceled, KindInternal,
	KindSessionGone, KindNotFound,
}

// KindError is ErrorKind's inverse: the error a kind is classified from,
// for rebuilding a failure that crossed a wire (PeerError) as one every
// surface classifies as if it had happened here. Written beside
// ErrorKind, so that the two stay in step.
func KindError(kind string) error {
	switch kind {
	case KindInvalidRequest:
		return ErrInvalidRequest
	case KindBadPath:
		return ErrBadPath
	case KindPermissionDenied:
		return ErrPermission
	case KindFileNotFound:
		return ErrFileNotFound
	case KindTooLarge:
		return ErrTooLarge
	case KindSessionNotFound:
		return ErrSessionNotFound
	case KindSessionEnded:
		return ErrSessionEnded
	case KindSessionLost:
		return ErrSessionLost
	case KindSessionGone:
		return ErrSessionGone
	case KindNotFound:
		return ErrNotFound
	case KindTooManySessions:
		return ErrTooManySessions
	case KindKeyLimit:
		return ErrKeyLimit
	case KindSessionPaused:
		return ErrSessionPaused
	case KindSnapshotNotFound:
		return ErrSnapshotNotFound
	case KindEnvironmentNotFound:
		return ErrEnvironmentNotFound
	case KindSnapshotUnusable:
		return ErrSnapshotUnusable
	case KindPortClosed:
		return ErrPortClosed
	case KindForbidden:
		return ErrForbidden
	case KindEnvironmentExists:
		return envstore.ErrExists
	case KindBuildFailed:
		return ErrBuildFailed
	case KindRateLimited:
		return access.ErrRateLimited
	case KindBusy:
		return ErrBusy
	case KindShuttingDown:
		return ErrShuttingDown
	case KindUnavailable:
		return ErrUnavailable
	case KindCanceled:
		return context.Canceled
	}
	return errors.New("internal error")
}
