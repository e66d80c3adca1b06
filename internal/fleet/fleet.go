package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/pool"
)

// ErrBusy means every slot of the budget was held for the whole queue
// timeout.
var ErrBusy = pool.ErrBusy

// Config is what the fleet runs with.
type Config struct {
	// MaxSandboxes is the budget: sandboxes that may exist at once, of
	// every kind, pooled or not, sessions included.
	MaxSandboxes int
	// QueueTimeout bounds the wait for a slot when the budget is spent.
	QueueTimeout time.Duration
	// Interpreter is the Python zygotes run.
	Interpreter string
	// Starters start whole sandboxes, by backend ([Native], [GVisor]); a
	// backend without one is not offered.
	Starters map[string]Starter
	// Classes are the pools to keep.
	Classes []ClassSpec
	// ClassIdle is how long a class made on demand (an environment's,
	// see TakeIn) is kept unused before it is closed (0: 10 minutes).
	ClassIdle time.Duration
}

// Fleet owns every running sandbox. It is safe for concurrent use.
type Fleet struct {
	cfg     Config
	budget  *pool.Budget
	classes []*class

	mu     sync.Mutex
	kept   map[string]keeper // pools of the service's own items (spare sessions)
	dyn    map[dynKey]*dynClass
	closed bool
}

// keeper is a pool of the service's items, seen by the fleet.
type keeper interface {
	Stats() pool.Stats
	Close()
}

// New starts a fleet and the pools of cfg.Classes.
func New(cfg Config) *Fleet {
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = 10 * time.Second
	}
	f := &Fleet{cfg: cfg, budget: pool.NewBudget(cfg.MaxSandboxes), kept: map[string]keeper{}, dyn: map[dynKey]*dynClass{}}
	for _, cs := range cfg.Classes {
		if cs.Ready > 0 && cfg.Starters[cs.Backend] != nil {
			f.classes = append(f.classes, f.newClass(cs))
		}
	}
	return f
}

// Start starts a sandbox for spec on backend, once the budget has a slot
// for it (queuing up to the queue timeout: then [ErrBusy]). spec's
// Stdout and Stderr receive its output outside runs.
func (f *Fleet) Start(ctx context.Context, backend string, spec jail.Spec) (*Lease, error) {
	slot, err := f.budget.Acquire(ctx, f.cfg.QueueTimeout)
	if err != nil {
		return nil, err
	}
	l, err := f.launch(ctx, slot, backend, spec)
	if err != nil {
		slot.Release()
		return nil, err
	}
	return l, nil
}

// launch starts a sandbox under a slot already held.
func (f *Fleet) launch(ctx context.Context, slot *pool.Slot, backend string, spec jail.Spec) (*Lease, error) {
	l := &Lease{fleet: f, backend: backend, slot: slot, stdout: &switchWriter{w: spec.Stdout}, stderr: &switchWriter{w: spec.Stderr}}
	b, err := f.startBox(ctx, backend, spec, l.stdout, l.stderr)
	if err != nil {
		return nil, err
	}
	l.box = b
	return l, nil
}

// startBox starts a whole sandbox whose output goes to stdout and stderr.
func (f *Fleet) startBox(ctx context.Context, backend string, spec jail.Spec, stdout, stderr io.Writer) (Box, error) {
	st := f.cfg.Starters[backend]
	if st == nil {
		return nil, fmt.Errorf("fleet: no %q backend here", backend)
	}
	if spec.ID == "" {
		spec.ID = jail.NewID()
	}
	spec.Stdout, spec.Stderr = stdout, stderr
	return st.Start(ctx, spec)
}

// Take returns a pooled sandbox for a run of class on backend with limits
// l, armed with them (ctx's end kills it); ok is false when no pool serves
// such a run (the caller starts one).
func (f *Fleet) Take(ctx context.Context, backend, class string, l jail.Limits) (lease *Lease, ok bool, err error) {
	cl := f.class(backend, class)
	if cl == nil || !cl.fits(l) {
		return nil, false, nil
	}
	lease, err = cl.pool.Get(ctx)
	if err != nil {
		return nil, true, err
	}
	lease.class = cl
	lease.Arm(ctx, l.Timeout, l.CPUTime)
	return lease, true, nil
}

func (f *Fleet) class(backend, name string) *class {
	for _, cl := range f.classes {
		if cl.Backend == backend && cl.Name == name {
			return cl
		}
	}
	return nil
}

// Launch starts a sandbox under the slot a [Keep] pool took for one item.
type Launch func(ctx context.Context, backend string, spec jail.Spec) (*Lease, error)

// Kept is a pool of the service's own items (spare sessions), each holding
// a sandbox of the fleet's budget.
type Kept[T any] struct{ *pool.Pool[T] }

// Budgeted is a fleet whose budget [Keep]'s pools share: a *Fleet, or a
// type that embeds one (a consumer's narrow view of the fleet, or its
// tests' fake over stand-in sandboxes).
type Budgeted interface{ budgeted() *Fleet }

func (f *Fleet) budgeted() *Fleet { return f }

// Keep starts a pool of ready items of the service's own kind, named name
// in Stats. create builds one item and starts its sandbox with launch
// (once); destroy ends an item the pool will not hand out, closing its
// lease. Ready items hold slots, and give them up to callers queued on
// the budget like every pooled sandbox.
func Keep[T any](b Budgeted, name string, ready int, create func(context.Context, Launch) (T, error), destroy func(T), alive func(T) bool) (*Kept[T], error) {
	f := b.budgeted()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("fleet: closed")
	}
	mk := func(ctx context.Context, slot *pool.Slot) (T, error) {
		used := false
		return create(ctx, func(ctx context.Context, backend string, spec jail.Spec) (*Lease, error) {
			if used {
				return nil, errors.New("fleet: one sandbox per kept item")
			}
			used = true
			return f.launch(ctx, slot, backend, spec)
		})
	}
	k := &Kept[T]{pool.New(pool.Config{Ready: ready, Budget: f.budget, QueueTimeout: f.cfg.QueueTimeout, Refillers: 1}, mk, destroy, alive)}
	f.kept[name] = k
	return k, nil
}

// Stats reports each pool by name: the classes ("basic", "data_science",
// "gvisor/basic", ...), the environments' ("basic@env:<id>"), and the
// kept pools.
func (f *Fleet) Stats() map[string]pool.Stats {
	out := map[string]pool.Stats{}
	for _, cl := range f.classes {
		out[cl.key] = cl.pool.Stats()
	}
	f.mu.Lock()
	for name, k := range f.kept {
		out[name] = k.Stats()
	}
	for _, dc := range f.dyn {
		out[dc.key] = dc.pool.Stats()
	}
	f.mu.Unlock()
	return out
}

// Budget reports the budget: its size, the slots held, the callers queued.
func (f *Fleet) Budget() pool.BudgetStats { return f.budget.Stats() }

// Close ends every ready sandbox, the kept pools and the zygotes. Leases
// held are their holders' to end; their slots come back as they do.
func (f *Fleet) Close() {
	f.mu.Lock()
	f.closed = true
	kept, dyn := f.kept, f.dyn
	f.kept, f.dyn = map[string]keeper{}, map[dynKey]*dynClass{}
	f.mu.Unlock()
	for _, k := range kept {
		k.Close()
	}
	for _, dc := range dyn {
		dc.timer.Stop()
		dc.close()
	}
	for _, cl := range f.classes {
		cl.close()
	}
	// The cgroups kept for the next cells: none outlives the fleet.
	jail.ReleaseCellCgroups()
}
