package service

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
)

// A sandbox that cannot start from a memory image (another root than the
// image's, another runsc) is the snapshot's failure, not the service's:
// snapshot_unusable, its reason kept.
func TestImageStartFailureIsTheSnapshots(t *testing.T) {
	s := &Service{cfg: config.DefaultConfig()}
	for _, cause := range []error{fleet.ErrImageMismatch, fleet.ErrBadImage} {
		err := s.fleetError(context.Background(), fmt.Errorf("%w: its sandbox ran on the root /a, the restore's root is /b", cause))
		if ErrorKind(err) != KindSnapshotUnusable || !strings.Contains(err.Error(), "root /a, the restore's root is /b") {
			t.Errorf("%v: %v (%s)", cause, err, ErrorKind(err))
		}
	}
}
