package persist_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/persist"
	"github.com/codecage/codecage/internal/snapstore"
)

// A failure of the store or of a saved state gets its kind once, and its
// text does not say the kind twice.
func TestSnapshotErrClassifies(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind error
	}{
		{fmt.Errorf("%w: x", snapstore.ErrNotFound), errdefs.ErrSnapshotNotFound},
		{fmt.Errorf("%w: x", snapstore.ErrLimit), errdefs.ErrTooLarge},
		{fmt.Errorf("%w: x", fleet.ErrStateTooLarge), errdefs.ErrTooLarge},
		{fmt.Errorf("%w: x", snapstore.ErrTampered), errdefs.ErrSnapshotUnusable},
		{fmt.Errorf("%w: x", fleet.ErrImageMismatch), errdefs.ErrSnapshotUnusable},
		{fmt.Errorf("%w: x", snapstore.ErrExists), errdefs.ErrInvalidRequest},
		{fmt.Errorf("%w: x", snapstore.ErrUnavailable), errdefs.ErrUnavailable},
	} {
		got := errdefs.Snapshot(c.err)
		if !errors.Is(got, c.kind) || strings.Count(got.Error(), c.kind.Error()) != 1 {
			t.Errorf("%v: %v, want kind %v", c.err, got, c.kind)
		}
	}
	if errdefs.Snapshot(nil) != nil {
		t.Error("nil is not nil")
	}
	other := errors.New("other")
	if errdefs.Snapshot(other) != other {
		t.Error("an unknown error is not kept as it is")
	}
}

// A snapshot's name is printable text within its bound.
func TestCheckSnapshotName(t *testing.T) {
	for _, ok := range []string{"", "before the upgrade", strings.Repeat("é", persist.MaxSnapshotName/2)} {
		if err := persist.CheckSnapshotName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{strings.Repeat("a", persist.MaxSnapshotName+1), "a\nb", "\xff"} {
		if err := persist.CheckSnapshotName(bad); !errors.Is(err, errdefs.ErrInvalidRequest) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
