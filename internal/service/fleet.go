package service

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/persist"
)

// newFleet is the fleet of the operator's configuration: its budget, its
// backends and the pools it keeps. With cgroups, a native class forks its
// sandboxes from a zygote; without, it keeps whole jails.
func (s *Service) newFleet() *fleet.Fleet {
	c := s.cfg
	// Commands and pip run in the native jail whatever the isolation of
	// Python runs.
	starters := map[string]fleet.Starter{fleet.Native: fleet.NativeStarter{}}
	if c.GVisorInUse() {
		starters[fleet.GVisor] = fleet.NewGVisorStarter(c.Runsc, c.GVisorPlatform)
	}
	var classes []fleet.ClassSpec
	add := func(backend, name string, ready int, memory int64, dataScience bool) {
		if backend == fleet.Native && c.Isolation == config.IsolationGVisor {
			return // no Python run is native
		}
		classes = append(classes, fleet.ClassSpec{Backend: backend, Name: name, Ready: ready, Zygote: c.Zygote,
			Spec: s.pooledWork(memory, dataScience).Spec()})
	}
	add(fleet.Native, policy.Basic, c.PoolSize, c.MemoryLimit, false)
	// gVisor takes a few hundred milliseconds to boot: without its pools
	// every use_container run would wait for one.
	add(fleet.GVisor, policy.Basic, c.GVisorPoolSize, c.MemoryLimit, false)
	if c.EnableDataScience {
		add(fleet.Native, policy.DataScience, c.DataPoolSize, c.DataMemory, true)
		add(fleet.GVisor, policy.DataScience, c.GVisorDataPoolSize, c.DataMemory, true)
	}
	return fleet.New(fleet.Config{MaxSandboxes: c.MaxSandboxes, QueueTimeout: c.QueueTimeout, Interpreter: c.Interpreter,
		Starters: starters, Classes: classes, ClassIdle: c.EnvPoolIdle})
}

// pooledWork is a pooled sandbox of a class: it waits up to
// SANDBOX_POOL_MAX_IDLE until a run arms its own limits. A data_science
// one imports numpy and pandas once, before any request, so the run's own
// "import numpy" costs nothing.
func (s *Service) pooledWork(memory int64, dataScience bool) fleet.Work {
	c := s.cfg
	return fleet.Work{Kind: fleet.Pooled, Interpreter: c.Interpreter, Layer: s.layerBinds,
		Limits:      s.caps().Pooled(c.PoolMaxIdle, c.CPUTime, memory),
		DataScience: dataScience, Preload: dataScience}
}

// caps are the operator's bounds every sandbox shares.
func (s *Service) caps() fleet.Caps {
	c := s.cfg
	return fleet.Caps{CPUCores: c.CPULimit, Memory: c.MemoryLimit, Output: c.OutputSize, MaxProcesses: c.MaxProcesses,
		FileSize: c.MaxFileSize, OpenFiles: c.MaxOpenFiles, Tmp: c.TmpSize, Workspace: c.WorkspaceMax}
}

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

// fleetError says what a failure to get a sandbox means to the caller.
func (s *Service) fleetError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fleet.ErrBusy):
		return fmt.Errorf("%w: all %d sandboxes are in use (SANDBOX_MAX_SANDBOXES); try again shortly", ErrBusy, s.cfg.MaxSandboxes)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrInvalidRequest):
		return err
	case errors.Is(err, fleet.ErrImageMismatch), errors.Is(err, fleet.ErrBadImage):
		// A start from a memory image that cannot be restored here (another
		// runsc, or another root than its environment's): the snapshot's.
		return persist.SnapshotErr(err)
	case errors.Is(err, syscall.E2BIG):
		// What checkArgList did not foresee (a smaller stack limit): still
		// the caller's arguments.
		return fmt.Errorf("%w: argument list too long for the kernel (E2BIG): %v", ErrInvalidRequest, err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// Close ends the sessions, the ready sandboxes of every pool, and the
// zygotes. Runs in progress finish on their own.
func (s *Service) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	s.sessions.CloseAll()
	s.fleet.Close()
	s.persist.Close()
}

// PoolStats reports each pool by class name, and the spare sessions of
// each backend as "session/native" and "session/gvisor".
func (s *Service) PoolStats() map[string]fleet.PoolStats { return s.fleet.Stats() }

// Budget reports SANDBOX_MAX_SANDBOXES: its size, the sandboxes that hold
// a slot of it (running, starting, ready in a pool, sessions), and the
// callers queued for one.
func (s *Service) Budget() fleet.BudgetStats { return s.fleet.Budget() }
