package errdefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/snapstore"
	"github.com/codecage/codecage/internal/vault"
)

// The classification of the lower layers' errors (the fleet's, the
// snapshot store's) into the service's, in one place.

// Fleet says what a failure to get a sandbox means to the caller; busy
// names SANDBOX_MAX_SANDBOXES, which is maxSandboxes.
func Fleet(ctx context.Context, err error, maxSandboxes int) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fleet.ErrBusy):
		return fmt.Errorf("%w: all %d sandboxes are in use (SANDBOX_MAX_SANDBOXES); try again shortly", ErrBusy, maxSandboxes)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrInvalidRequest):
		return err
	case errors.Is(err, fleet.ErrImageMismatch), errors.Is(err, fleet.ErrBadImage):
		// A start from a memory image that cannot be restored here (another
		// runsc, or another root than its environment's): the snapshot's.
		return Snapshot(err)
	case errors.Is(err, syscall.E2BIG):
		// What checkArgList did not foresee (a smaller stack limit): still
		// the caller's arguments.
		return fmt.Errorf("%w: argument list too long for the kernel (E2BIG): %v", ErrInvalidRequest, err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// Snapshot classifies a failure of the store or of a saved state (the
// root's, too: a start from a memory image that cannot be restored).
func Snapshot(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, snapstore.ErrNotFound):
		return as(ErrSnapshotNotFound, err)
	case errors.Is(err, snapstore.ErrLimit), errors.Is(err, fleet.ErrStateTooLarge):
		return as(ErrTooLarge, err)
	case errors.Is(err, snapstore.ErrTampered), errors.Is(err, fleet.ErrImageMismatch), errors.Is(err, fleet.ErrBadImage),
		errors.Is(err, fleet.ErrStateRefused):
		return as(ErrSnapshotUnusable, err)
	case errors.Is(err, snapstore.ErrInvalid), errors.Is(err, snapstore.ErrExists):
		return as(ErrInvalidRequest, err)
	case errors.Is(err, snapstore.ErrUnavailable), errors.Is(err, snapstore.ErrNoSecret):
		return as(ErrUnavailable, err)
	}
	return err
}

// as is err classified as kind, its text not repeating kind's
// ("snapshot not found: snapshot not found: x" is "snapshot not found: x").
func as(kind, err error) error {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, kind.Error()); ok {
		return fmt.Errorf("%w%s", kind, rest)
	}
	return fmt.Errorf("%w: %s", kind, msg)
}

// Port says what a failure to reach port of session id means to the
// caller.
func Port(ctx context.Context, err error, port int, id string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fleet.ErrPortClosed):
		return fmt.Errorf("%w: nothing listens on port %d in session %s", ErrPortClosed, port, bounded.Quote(id))
	case errors.Is(err, fleet.ErrPortsUnsupported):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	case errors.Is(err, ErrSessionPaused), errors.Is(err, ErrSessionNotFound), ctx.Err() != nil:
		return err
	}
	return fmt.Errorf("%w: port %d: %v", ErrUnavailable, port, err)
}

// Secret classifies a failure of the vault of egress secrets.
func Secret(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, vault.ErrNotFound):
		return as(ErrNotFound, err)
	case errors.Is(err, vault.ErrInvalid):
		return as(ErrInvalidRequest, err)
	case errors.Is(err, vault.ErrLimit):
		return as(ErrKeyLimit, err)
	case errors.Is(err, vault.ErrUnavailable), errors.Is(err, snapstore.ErrNoSecret), errors.Is(err, snapstore.ErrUnavailable):
		return as(ErrUnavailable, err)
	case errors.Is(err, snapstore.ErrInvalid):
		return as(ErrUnavailable, err) // the operator's secret, not the caller's request
	}
	return err
}
