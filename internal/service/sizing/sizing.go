// Package sizing turns the operator's configuration into the fleet's
// terms: the bounds every sandbox shares (Caps), the fleet and the pools
// it keeps (Fleet, Pooled), and a run's limits from what its request asks
// (Run). It decides nothing else: the service and its domains ask it.
package sizing

import (
	"errors"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Caps are the operator's bounds every sandbox shares.
func Caps(c config.Config) fleet.Caps {
	return fleet.Caps{CPUCores: c.CPULimit, Memory: c.MemoryLimit, Output: c.OutputSize, MaxProcesses: c.MaxProcesses,
		FileSize: c.MaxFileSize, OpenFiles: c.MaxOpenFiles, Tmp: c.TmpSize, Workspace: c.WorkspaceMax}
}

// Fleet is the fleet of the operator's configuration: its budget, its
// backends and the pools it keeps (layer: the operator's package layer).
// With cgroups, a native class forks its sandboxes from a zygote; without,
// it keeps whole jails.
func Fleet(c config.Config, layer []fleet.Bind) fleet.Config {
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
			Spec: Pooled(c, layer, memory, dataScience).Spec()})
	}
	add(fleet.Native, policy.Basic, c.PoolSize, c.MemoryLimit, false)
	// gVisor takes a few hundred milliseconds to boot: without its pools
	// every use_container run would wait for one.
	add(fleet.GVisor, policy.Basic, c.GVisorPoolSize, c.MemoryLimit, false)
	if c.EnableDataScience {
		add(fleet.Native, policy.DataScience, c.DataPoolSize, c.DataMemory, true)
		add(fleet.GVisor, policy.DataScience, c.GVisorDataPoolSize, c.DataMemory, true)
	}
	return fleet.Config{MaxSandboxes: c.MaxSandboxes, QueueTimeout: c.QueueTimeout, Interpreter: c.Interpreter,
		Starters: starters, Classes: classes, ClassIdle: c.EnvPoolIdle}
}

// Pooled is a pooled sandbox of a class: it waits up to
// SANDBOX_POOL_MAX_IDLE until a run arms its own limits. A data_science
// one imports numpy and pandas once, before any request, so the run's own
// "import numpy" costs nothing.
func Pooled(c config.Config, layer []fleet.Bind, memory int64, dataScience bool) fleet.Work {
	return fleet.Work{Kind: fleet.Pooled, Interpreter: c.Interpreter, Layer: layer,
		Limits:      Caps(c).Pooled(c.PoolMaxIdle, c.CPUTime, memory),
		DataScience: dataScience, Preload: dataScience}
}

// Asked is what a request asks of a run's limits; zero is the default.
type Asked struct {
	Timeout, CPUTime time.Duration
	Memory, Output   int64
}

// Run turns a request's limits and the operator's defaults and bounds
// into the jail's limits; a run with the data_science feature gets its
// memory default. Limits beyond the operator's bounds are an
// errdefs.ErrInvalidRequest naming each.
func Run(c config.Config, a Asked, dataScience bool) (fleet.Limits, error) {
	checks := []error{
		policy.CheckDuration("timeout", a.Timeout, c.MaxTimeout),
		policy.CheckDuration("cpu_time", a.CPUTime, c.MaxCPUTime),
		policy.CheckBytes("memory_limit", a.Memory, config.MinMemory, c.MaxMemory),
		policy.CheckBytes("output_limit", a.Output, 1, c.MaxOutput),
	}
	if err := errors.Join(checks...); err != nil {
		return fleet.Limits{}, fmt.Errorf("%w: %v", errdefs.ErrInvalidRequest, err)
	}
	n := fleet.Need{
		Timeout: pick(a.Timeout, c.Timeout),
		Memory:  pick(a.Memory, c.MemoryLimit),
		Output:  pick(a.Output, c.OutputSize),
	}
	if a.Memory == 0 && dataScience {
		n.Memory = c.DataMemory // numpy, OpenBLAS and pandas need far more than a bare interpreter
	}
	// A run that may take longer than the default CPU time may also use it,
	// unless it asks for less.
	n.CPUTime = pick(a.CPUTime, min(max(c.CPUTime, n.Timeout), c.MaxCPUTime))
	return Caps(c).Run(n), nil
}

// pick is v when given, else def.
func pick[T int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
