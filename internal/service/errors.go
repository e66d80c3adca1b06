package service

import "github.com/codecage/codecage/internal/service/errdefs"

// The service's errors live in the errdefs leaf, which its domains share;
// these names keep the surfaces' spelling (service.ErrBadPath) unchanged.

// Sentinels (errdefs documents each).
var (
	ErrInvalidRequest      = errdefs.ErrInvalidRequest
	ErrUnavailable         = errdefs.ErrUnavailable
	ErrShuttingDown        = errdefs.ErrShuttingDown
	ErrForbidden           = errdefs.ErrForbidden
	ErrBusy                = errdefs.ErrBusy
	ErrUnknownLanguage     = errdefs.ErrUnknownLanguage
	ErrPortClosed          = errdefs.ErrPortClosed
	ErrBadPath             = errdefs.ErrBadPath
	ErrFileNotFound        = errdefs.ErrFileNotFound
	ErrTooLarge            = errdefs.ErrTooLarge
	ErrPermission          = errdefs.ErrPermission
	ErrWatchEnded          = errdefs.ErrWatchEnded
	ErrSessionNotFound     = errdefs.ErrSessionNotFound
	ErrSessionEnded        = errdefs.ErrSessionEnded
	ErrTooManySessions     = errdefs.ErrTooManySessions
	ErrSessionLost         = errdefs.ErrSessionLost
	ErrSessionGone         = errdefs.ErrSessionGone
	ErrNotFound            = errdefs.ErrNotFound
	ErrSessionPaused       = errdefs.ErrSessionPaused
	ErrSnapshotNotFound    = errdefs.ErrSnapshotNotFound
	ErrSnapshotUnusable    = errdefs.ErrSnapshotUnusable
	ErrEnvironmentNotFound = errdefs.ErrEnvironmentNotFound
)

// Error kinds (errdefs documents each).
const (
	KindInvalidRequest      = errdefs.KindInvalidRequest
	KindBadPath             = errdefs.KindBadPath
	KindPermissionDenied    = errdefs.KindPermissionDenied
	KindFileNotFound        = errdefs.KindFileNotFound
	KindTooLarge            = errdefs.KindTooLarge
	KindSessionNotFound     = errdefs.KindSessionNotFound
	KindSessionEnded        = errdefs.KindSessionEnded
	KindSessionLost         = errdefs.KindSessionLost
	KindSessionGone         = errdefs.KindSessionGone
	KindNotFound            = errdefs.KindNotFound
	KindTooManySessions     = errdefs.KindTooManySessions
	KindKeyLimit            = errdefs.KindKeyLimit
	KindSessionPaused       = errdefs.KindSessionPaused
	KindSnapshotNotFound    = errdefs.KindSnapshotNotFound
	KindEnvironmentNotFound = errdefs.KindEnvironmentNotFound
	KindSnapshotUnusable    = errdefs.KindSnapshotUnusable
	KindPortClosed          = errdefs.KindPortClosed
	KindForbidden           = errdefs.KindForbidden
	KindEnvironmentExists   = errdefs.KindEnvironmentExists
	KindBuildFailed         = errdefs.KindBuildFailed
	KindRateLimited         = errdefs.KindRateLimited
	KindBusy                = errdefs.KindBusy
	KindUnavailable         = errdefs.KindUnavailable
	KindShuttingDown        = errdefs.KindShuttingDown
	KindCanceled            = errdefs.KindCanceled
	KindInternal            = errdefs.KindInternal
)

// ErrorKind names the kind of a service error (errdefs.ErrorKind).
func ErrorKind(err error) string { return errdefs.ErrorKind(err) }

// KindError is ErrorKind's inverse (errdefs.KindError).
func KindError(kind string) error { return errdefs.KindError(kind) }

// Kinds lists every error kind ErrorKind returns (errdefs.Kinds).
var Kinds = errdefs.Kinds
