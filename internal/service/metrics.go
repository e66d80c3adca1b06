package service

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/service/report"
	"github.com/codecage/codecage/internal/service/sizing"
)

// SessionMetrics is what a session's sandbox uses now (report.SessionMetrics).
type SessionMetrics = report.SessionMetrics

// SessionMetrics samples what one of the owner's sessions uses now, from
// its sandboxes' cgroups (v1 or v2) and its workspace. A paused session
// that is parked (its sandbox ended) answers ErrSessionPaused.
func (s *Service) SessionMetrics(ctx context.Context, id, owner string) (*SessionMetrics, error) {
	return do(ctx, s, opMetrics, call[*SessionMetrics]{
		session: id, owner: owner,
		run: func(ctx context.Context) (*SessionMetrics, error) {
			se, err := s.session(id, owner)
			if err != nil {
				if _, ok, perr := s.parked(ctx, owner, id); ok && perr == nil {
					return nil, fmt.Errorf("%w: session %s is parked: it has no sandbox to measure", ErrSessionPaused, Quote(id))
				}
				return nil, err
			}
			now := time.Now()
			use := se.Usage()
			cpu, wall := se.CPUSinceLastSample(now, use.CPU)
			m := report.Sample(now, se.Limits(), sizing.Caps(s.cfg), use, cpu, wall)
			m.DiskUsed, err = s.files.WorkspaceUsed(ctx, se)
			if err != nil {
				return nil, err
			}
			return m, nil
		},
	})
}

func serveMetrics(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) (*SessionMetrics, error) {
	return s.SessionMetrics(ctx, call.SessionID, call.Owner)
}
