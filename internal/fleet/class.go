package fleet

import (
	"cmp"
	"context"
	"sync/atomic"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/pool"
)

// ClassSpec describes one kind of pooled sandbox.
type ClassSpec struct {
	// Backend is [Native] or [GVisor].
	Backend string
	// Name is the profile class, e.g. "basic" or "data_science".
	Name string
	// Ready is how many sandboxes the class keeps waiting.
	Ready int
	// Spec is what each sandbox starts with: the harness's argv and
	// environment, binds and the class's limits (Timeout is how long one
	// may wait unused; a run arms its own).
	Spec jail.Spec
	// Zygote forks the class's sandboxes as cells of a zygote instead of
	// starting whole jails (native, with cgroups only).
	Zygote bool
	// Interpreter is the Python of the class's zygote ("": the fleet's);
	// an environment's, whose root Spec.Root is.
	Interpreter string
	// Env, when set, is the ID of the environment the class's sandboxes
	// start from: a class made on demand (TakeIn), not one of
	// Config.Classes. Variant tells apart classes of one environment's
	// content whose sandboxes start differently (its records' metadata).
	Env, Variant string
}

// class is a pool of one kind of sandbox.
type class struct {
	ClassSpec
	key    string // the name in Stats
	pool   *pool.Pool[*Lease]
	zygote *zygote // nil: whole sandboxes
	// started is the pool once made: its refillers may call create
	// before the pool field is set.
	started atomic.Pointer[pool.Pool[*Lease]]
}

// classKey names a class in Stats: "basic", "gvisor/basic".
func classKey(backend, name string) string {
	if backend == GVisor {
		return GVisor + "/" + name
	}
	return name
}

// demand reports whether callers wait for this class's next sandbox.
func (cl *class) demand() bool {
	p := cl.started.Load()
	return p != nil && p.Stats().Waiting > 0
}

// fits reports whether a run with limits l can use the class's sandboxes:
// they were started with the class's memory, output, per-process CPU and
// CPU bandwidth limits, so only runs within those can.
func (cl *class) fits(l jail.Limits) bool {
	c := cl.Spec.Limits
	return l.MemoryBytes == c.MemoryBytes && l.OutputBytes == c.OutputBytes && l.CPUTime <= c.CPUTime && l.CPUCores == c.CPUCores
}

func (f *Fleet) newClass(cs ClassSpec) *class {
	cl := &class{ClassSpec: cs, key: classKey(cs.Backend, cs.Name)}
	if cs.Zygote && cs.Backend == Native && jail.ProbeHost().CgroupVersion() != 0 {
		cl.zygote = newZygote(cmp.Or(cs.Interpreter, f.cfg.Interpreter), cs.Spec, f.cfg.MaxSandboxes)
	}
	create := func(ctx context.Context, slot *pool.Slot) (*Lease, error) {
		if cl.zygote == nil {
			return f.launch(ctx, slot, cs.Backend, cs.Spec)
		}
		l := &Lease{fleet: f, backend: Native, slot: slot, stdout: &switchWriter{}, stderr: &switchWriter{}}
		// A cell a caller already waits for goes straight to it: warming
		// it would only delay that caller and spend CPU the next needs.
		b, err := cl.zygote.fork(ctx, cs.Spec.Limits, !cl.demand(), l.stdout, l.stderr)
		if err != nil {
			return nil, err
		}
		l.box = b
		return l, nil
	}
	cl.pool = pool.New(pool.Config{Ready: cs.Ready, Budget: f.budget, QueueTimeout: f.cfg.QueueTimeout, Refillers: 2},
		create, (*Lease).Close, (*Lease).alive)
	cl.started.Store(cl.pool)
	return cl
}

// close ends the class's ready sandboxes and its zygote.
func (cl *class) close() {
	cl.pool.Close()
	if cl.zygote != nil {
		cl.zygote.close()
	}
}
