package service

import (
	"context"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// sandboxFor returns a sandbox for a stateless run from environment env
// (zero: the host's root): a pooled one when a pool serves such a run
// (never a network run: each has its own proxy, set at start), else one
// started for the work.
func (s *Service) sandboxFor(ctx context.Context, backend string, features policy.Features, l fleet.Limits, work fleet.Work, env envstore.Env) (*fleet.Lease, error) {
	if !features.Network {
		class := policy.Basic
		if features.DataScience {
			class = policy.DataScience
		}
		var lease *fleet.Lease
		var pooled bool
		var err error
		if env.ID != "" {
			lease, pooled, err = s.envs.TakeIn(ctx, backend, class, env, l)
		} else {
			lease, pooled, err = s.fleet.Take(ctx, backend, class, l)
		}
		if pooled {
			return lease, s.fleetError(ctx, err)
		}
	}
	lease, err := s.fleet.Start(ctx, backend, work.Spec())
	return lease, s.fleetError(ctx, err)
}

// fleetError says what a failure to get a sandbox means to the caller
// (errdefs.Fleet).
func (s *Service) fleetError(ctx context.Context, err error) error {
	return errdefs.Fleet(ctx, err, s.cfg.MaxSandboxes)
}

// Close ends the sessions, the ready sandboxes of every pool, and the
// zygotes. Runs in progress finish on their own.
func (s *Service) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	s.sessions.CloseAll()
	s.fleet.Close()
	s.persist.Close()
	s.secrets.Close()
}

// PoolStats reports each pool by class name, and the spare sessions of
// each backend as "session/native" and "session/gvisor".
func (s *Service) PoolStats() map[string]fleet.PoolStats { return s.fleet.Stats() }

// Budget reports SANDBOX_MAX_SANDBOXES: its size, the sandboxes that hold
// a slot of it (running, starting, ready in a pool, sessions), and the
// callers queued for one.
func (s *Service) Budget() fleet.BudgetStats { return s.fleet.Budget() }
