package envs

import (
	"fmt"
	"sort"
	"sync"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// registry is the service's own state of environments: how many live
// sandboxes use each (by ID), so that the collector never deletes a root
// under one, and the builds in progress (by name), bounded.
type registry struct {
	// gcMu: a collection holds it; taking a use holds its read side, so
	// that a record read and its use count are one step to the collector.
	gcMu sync.RWMutex

	mu       sync.Mutex
	use      map[string]int  // env ID -> sandboxes using it
	building map[string]bool // names being built
}

// InUse counts one sandbox using the environment of this ID until the
// returned release is called (once; more calls do nothing). For the run
// side: take it before the sandbox mounts the environment's root and
// release it when the sandbox is gone. Use reads the record and takes the
// use in one step; prefer it when starting from a name.
func (d *Envs) InUse(id string) func() {
	d.use.gcMu.RLock()
	defer d.use.gcMu.RUnlock()
	return d.use.take(id)
}

// Use reads the environment named name (as Get) and counts one use of it,
// with no collection in between; release when the sandbox is gone.
func (d *Envs) Use(name string) (envstore.Env, func(), error) {
	d.use.gcMu.RLock()
	defer d.use.gcMu.RUnlock()
	e, err := d.Get(name)
	if err != nil {
		return e, func() {}, err
	}
	return e, d.use.take(e.ID), nil
}

// ResolveAndUse is Use with Resolve's reading of name and its errors.
func (d *Envs) ResolveAndUse(name string) (envstore.Env, func(), error) {
	d.use.gcMu.RLock()
	defer d.use.gcMu.RUnlock()
	e, err := d.Resolve(name)
	if err != nil || e.ID == "" {
		return e, func() {}, err
	}
	return e, d.use.take(e.ID), nil
}

// Uses is how many sandboxes use the environment of this ID.
func (d *Envs) Uses(id string) int { return d.use.count(id) }

func (r *registry) take(id string) func() {
	r.mu.Lock()
	if r.use == nil {
		r.use = map[string]int{}
	}
	r.use[id]++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.use[id]--; r.use[id] <= 0 {
				delete(r.use, id)
			}
		})
	}
}

// count is how many sandboxes use id.
func (r *registry) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.use[id]
}

// ids lists the environments in use, sorted.
func (r *registry) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.use))
	for id := range r.use {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// startBuild claims a build slot for name: at most max at once, and one
// per name (a second build of a name being built is refused as existing).
func (r *registry) startBuild(name string, max int) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.building[name] {
		return nil, fmt.Errorf("environment %q: %w (a build of it is in progress)", name, envstore.ErrExists)
	}
	if len(r.building) >= max {
		return nil, fmt.Errorf("%w: %d environment builds are running (SANDBOX_ENV_MAX_BUILDS=%d); try again when one ends", errdefs.ErrBusy, len(r.building), max)
	}
	if r.building == nil {
		r.building = map[string]bool{}
	}
	r.building[name] = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.building, name)
	}, nil
}
