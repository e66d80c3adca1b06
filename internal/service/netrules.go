package service

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/check"
)

// NetworkRules are a session's own egress rules, within the operator's
// allow list: they only take away (egress.NetworkRules).
type NetworkRules = egress.NetworkRules

const opNetwork = "network"

// SetSessionNetwork replaces session id's egress rules (zero: none) while
// it runs; they apply to every connection its proxy admits from now on.
// It returns the rules in force, in their canonical form.
func (s *Service) SetSessionNetwork(ctx context.Context, id, owner string, rules NetworkRules) (NetworkRules, error) {
	return do(ctx, s, opNetwork, call[NetworkRules]{
		session: id, owner: owner, args: rules,
		check: func() error { _, err := check.Network(&rules, true); return err },
		run: func(context.Context) (NetworkRules, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return NetworkRules{}, err
			}
			r, err := check.Network(&rules, se.Imports().Uses(policy.Network))
			if err != nil {
				return NetworkRules{}, err
			}
			var inForce NetworkRules // none
			if r != nil {
				inForce = *r
			}
			return inForce, s.sessions.SetNetwork(se, inForce)
		},
		success: func(r NetworkRules, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "network", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: allow_out %d, deny_out %d", id, len(r.AllowOut), len(r.DenyOut))}
		},
	})
}

func serveNetwork(ctx context.Context, s *Service, call PeerCall, r NetworkRules, _ outputFunc) (NetworkRules, error) {
	return s.SetSessionNetwork(ctx, call.SessionID, call.Owner, r)
}
