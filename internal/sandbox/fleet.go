package sandbox

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/pool"
	"github.com/codecage/codecage/internal/runtime"
)

// ErrBusy means every sandbox is in use and none freed up in time.
var ErrBusy = errors.New("sandbox busy")

// newFleet is the fleet of the operator's configuration: its budget, its
// backends and the pools it keeps. With cgroups, a native class forks its
// sandboxes from a zygote; without, it keeps whole jails.
func (s *Service) newFleet() *fleet.Fleet {
	c := s.cfg
	// Commands and pip run in the native jail whatever the isolation of
	// Python runs.
	starters := map[string]fleet.Starter{fleet.Native: fleet.NativeStarter{}}
	if c.GVisorInUse() {
		starters[fleet.GVisor] = fleet.GVisorStarter{Runtime: s.gvisorRuntime()}
	}
	var classes []fleet.ClassSpec
	add := func(backend, name string, ready int, memory int64, env, binds []string) {
		if backend == fleet.Native && c.Isolation == policy.IsolationGVisor {
			return // no Python run is native
		}
		classes = append(classes, fleet.ClassSpec{Backend: backend, Name: name, Ready: ready, Zygote: c.Zygote,
			Spec: jail.Spec{Argv: runtime.Argv(c.Interpreter), Env: env, ReadOnlyBinds: binds, Binds: s.layerBinds, Limits: s.classLimits(memory)}})
	}
	dsEnv, dsBinds := preloadedDataScience()
	add(fleet.Native, policy.Basic, c.PoolSize, c.MemoryLimit, runtime.Env(), nil)
	// gVisor takes a few hundred milliseconds to boot: without its pools
	// every use_container run would wait for one.
	add(fleet.GVisor, policy.Basic, c.GVisorPoolSize, c.MemoryLimit, runtime.Env(), nil)
	if c.EnableDataScience {
		add(fleet.Native, policy.DataScience, c.DataPoolSize, c.DataMemory, dsEnv, dsBinds)
		add(fleet.GVisor, policy.DataScience, c.GVisorDataPoolSize, c.DataMemory, dsEnv, dsBinds)
	}
	return fleet.New(fleet.Config{MaxSandboxes: c.MaxSandboxes, QueueTimeout: c.QueueTimeout, Interpreter: c.Interpreter,
		Starters: starters, Classes: classes})
}

// preloadedDataScience is the environment and binds of a pooled
// data_science sandbox: numpy and pandas are imported once, before any
// request, so the run's own "import numpy" costs nothing.
func preloadedDataScience() (env, binds []string) {
	env, binds = runtime.DataScienceEnv(runtime.Env())
	return append(env, "CODECAGE_PRELOAD=numpy,pandas"), binds
}

// classLimits are the limits a pooled sandbox starts with.
func (s *Service) classLimits(memory int64) jail.Limits {
	c := s.cfg
	return jail.Limits{
		Timeout:        c.PoolMaxIdle, // until a run arms its own
		CPUTime:        c.CPUTime,     // per-process rlimit; runs arm a budget
		CPUCores:       c.CPULimit,
		MemoryBytes:    memory,
		OutputBytes:    c.OutputSize,
		MaxProcesses:   c.MaxProcesses,
		FileSizeBytes:  c.MaxFileSize,
		OpenFiles:      c.MaxOpenFiles,
		TmpBytes:       c.TmpSize,
		WorkspaceBytes: c.WorkspaceMax,
	}
}

// sandboxFor returns a sandbox for a stateless run: a pooled one when a
// pool serves such a run (never a network run: each has its own proxy,
// set at start), else one started from spec.
func (s *Service) sandboxFor(ctx context.Context, backend string, features policy.Features, l jail.Limits, spec jail.Spec) (*fleet.Lease, error) {
	if !features.Network {
		class := policy.Basic
		if features.DataScience {
			class = policy.DataScience
		}
		lease, pooled, err := s.fleet.Take(ctx, backend, class, l)
		if pooled {
			return lease, s.fleetError(ctx, err)
		}
	}
	lease, err := s.fleet.Start(ctx, backend, spec)
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
	s.closeSessions()
	s.fleet.Close()
}

// PoolStats reports each pool by class name, and the spare sessions of
// each backend as "session/native" and "session/gvisor".
func (s *Service) PoolStats() map[string]pool.Stats { return s.fleet.Stats() }

// Budget reports SANDBOX_MAX_SANDBOXES: its size, the sandboxes that hold
// a slot of it (running, starting, ready in a pool, sessions), and the
// callers queued for one.
func (s *Service) Budget() pool.BudgetStats { return s.fleet.Budget() }
