// Package errdefs holds the service's errors: the sentinels every domain
// returns, the stable kinds the surfaces report them by, and the one
// classification between the two (ErrorKind, and its inverse KindError for
// failures that crossed a wire). It is a leaf: the service's domains and
// its root import it, it imports none of them.
package errdefs

import (
	"errors"
	"fmt"

	"github.com/codecage/codecage/internal/session"
)

// Errors of the service; surfaces map them to their own status codes.
var (
	// ErrInvalidRequest wraps every problem with the request itself.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnavailable means the host cannot run sandboxes.
	ErrUnavailable = session.ErrUnavailable
	// ErrShuttingDown: the service is stopping and takes no new work.
	ErrShuttingDown = errors.New("shutting down")
	// ErrForbidden: the caller is known but may not do this (an operation
	// for operators only).
	ErrForbidden = errors.New("forbidden")
	// ErrBusy means every sandbox is in use and none freed up in time.
	ErrBusy = errors.New("sandbox busy")
	// ErrUnknownLanguage means no kernel runs the language asked for.
	ErrUnknownLanguage = fmt.Errorf("%w: no kernel for this language", ErrInvalidRequest)
	// ErrPortClosed: nothing listens on the asked port in the session.
	ErrPortClosed = errors.New("port not open")
)

// File API errors.
var (
	// ErrBadPath: a path that is absolute outside /workspace, leaves the
	// workspace, or is not a clean name.
	ErrBadPath = errors.New("bad path")
	// ErrFileNotFound: no such file in the workspace.
	ErrFileNotFound = errors.New("file not found")
	// ErrTooLarge: a file or the workspace would exceed its size limit.
	ErrTooLarge = errors.New("too large")
	// ErrPermission: a change to what the sandbox has read-only (its
	// system tree, or the directories above its mounts), refused as the
	// sandbox's own code would be. It is a bad path too, for callers that
	// knew only those.
	ErrPermission = fmt.Errorf("%w: permission denied", ErrBadPath)
	// ErrChangedDuringRead: a file classified as text stopped being valid
	// UTF-8 while it was sent (the code rewrote it): the answer cannot be
	// finished truthfully and is cut.
	ErrChangedDuringRead = errors.New("the file changed while it was read")
	// ErrWatchEnded: the watch ended with its session (closed, paused,
	// parked), or was stopped.
	ErrWatchEnded = errors.New("the watch ended")
)

// Session errors: the session package's sentinels, under the service's
// names, so that ErrorKind classifies them with the others.
var (
	// ErrSessionNotFound: no such session, or not the caller's.
	ErrSessionNotFound = session.ErrNotFound
	// ErrSessionEnded: the session's interpreter was killed (timeout,
	// memory, output limit); restart it or create a new one.
	ErrSessionEnded = session.ErrEnded
	// ErrTooManySessions: SANDBOX_MAX_SESSIONS are open.
	ErrTooManySessions = session.ErrTooMany
	// ErrKeyLimit: the caller's API key holds its share of the server's
	// sessions or watches (SANDBOX_KEY_MAX_SESSIONS,
	// SANDBOX_KEY_MAX_WATCHES).
	ErrKeyLimit = session.ErrKeyLimit
	// ErrSessionLost: the session's replica is gone (stopped, deleted,
	// crashed), and its interpreter and workspace with it.
	ErrSessionLost = errors.New("session lost with its replica")
	// ErrSessionGone: the session was closed (killed), or reached its end
	// of life, while the request ran in it: the request has no answer of
	// its own, as a VM's connection that goes with the VM has none.
	ErrSessionGone = errors.New("session gone")
	// ErrNotFound: no such process or code context in the session.
	ErrNotFound = errors.New("not found")
)

// Sessions that outlive their sandbox, and environments.
var (
	// ErrSessionPaused: the session is paused and the request does not
	// resume it (a session with manual resume, or a second pause).
	ErrSessionPaused = session.ErrPaused
	// ErrSnapshotNotFound: no such snapshot, or not the caller's.
	ErrSnapshotNotFound = errors.New("snapshot not found")
	// ErrSnapshotUnusable: the snapshot cannot be loaded here: it was
	// altered (its seal fails), or it was made by another gVisor build or
	// platform.
	ErrSnapshotUnusable = errors.New("snapshot unusable")
	// ErrEnvironmentNotFound: a run or session names an environment the
	// operator has not built (or has removed).
	ErrEnvironmentNotFound = errors.New("environment not found")
	// ErrBuildFailed: an environment build ran and failed (pip, the Debian
	// or image build, or the environment's Python check); the message
	// says why.
	ErrBuildFailed = errors.New("environment build failed")
)
