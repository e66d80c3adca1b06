package service

import (
	"context"
)

// Taking over the sessions of a replica that stopped. A replica parks its
// sessions in the shared snapshot store as it stops (park.go); a session
// id still names it, so a request for one fails to reach it
// (ErrSessionLost). The replica the request came to then asks the cluster
// which replica took the session over (Cluster.Claim, one answer for all
// of them), and forwards the request there, or brings the session back
// itself (persist.BringBack). A session its replica did not park (a crash) stays
// lost.

// adopter returns the replica that serves session id of owner, whose
// replica is gone; found is false when no replica took it over and it
// is not in the store: it is lost.
func (s *Service) adopter(ctx context.Context, id, owner string) (who string, found bool) {
	who, err := s.cluster.Claim(ctx, id)
	if err != nil {
		s.log().Warn("a lost replica's session: no claim", "session", id, "err", err)
		return "", false
	}
	if who != s.cluster.Self() || s.sessions.Has(id) {
		return who, true
	}
	if _, ok, err := s.parked(ctx, owner, id); ok && err == nil {
		return who, true
	}
	s.cluster.Release(context.WithoutCancel(ctx), id)
	return "", false
}
