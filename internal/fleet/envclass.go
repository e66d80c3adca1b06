package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/pool"
)

// Classes made on demand: an environment's pools. The classes of
// Config.Classes live as long as the fleet; a class whose ClassSpec names
// an environment (Env) is made at the first run that asks for it, with a
// zygote of the environment's interpreter and root when the class forks
// cells, and closed once unused for Config.ClassIdle, or by CloseClass
// when the environment is removed. Its sandboxes hold slots of the one
// budget like every other.

// dynKey identifies a class made on demand.
type dynKey struct {
	backend, name, env, variant string
}

// dynClass is a class made on demand and what decides its end.
type dynClass struct {
	*class
	users int       // takes in progress (under Fleet.mu)
	last  time.Time // the last take's end (under Fleet.mu)
	timer *time.Timer
}

// TakeIn is Take for the class cs describes, made at its first use when
// cs names an environment (cs.Env; its Variant tells apart records of one
// content whose sandboxes start differently). ok is false when no pool
// serves such a run: cs keeps none ready (Ready 0), the limits do not
// fit, or the fleet is closed; the caller then starts a sandbox itself.
func (f *Fleet) TakeIn(ctx context.Context, cs ClassSpec, l jail.Limits) (lease *Lease, ok bool, err error) {
	if cs.Env == "" {
		return f.Take(ctx, cs.Backend, cs.Name, l)
	}
	if cs.Ready <= 0 || f.cfg.Starters[cs.Backend] == nil {
		return nil, false, nil
	}
	dc := f.dynClass(cs)
	if dc == nil {
		return nil, false, nil
	}
	defer f.untake(dc)
	if !dc.fits(l) {
		return nil, false, nil
	}
	lease, err = dc.pool.Get(ctx)
	if errors.Is(err, pool.ErrClosed) {
		return nil, false, nil // removed meanwhile: the caller starts one
	}
	if err != nil {
		return nil, true, err
	}
	lease.class = dc.class
	lease.Arm(ctx, l.Timeout, l.CPUTime)
	return lease, true, nil
}

// dynClass finds or makes the class of cs and counts a take in progress
// (untake ends it); nil once the fleet is closed.
func (f *Fleet) dynClass(cs ClassSpec) *dynClass {
	k := dynKey{cs.Backend, cs.Name, cs.Env, cs.Variant}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	dc := f.dyn[k]
	if dc == nil {
		dc = &dynClass{class: f.newClass(cs)}
		dc.key = envClassKey(cs)
		idle := f.classIdle()
		dc.timer = time.AfterFunc(idle, func() { f.closeIdle(k, dc) })
		f.dyn[k] = dc
	}
	dc.users++
	return dc
}

// untake ends a take of dc, which starts its idle time again.
func (f *Fleet) untake(dc *dynClass) {
	f.mu.Lock()
	dc.users--
	dc.last = time.Now()
	f.mu.Unlock()
}

// classIdle is how long a class made on demand lives unused.
func (f *Fleet) classIdle() time.Duration {
	if f.cfg.ClassIdle > 0 {
		return f.cfg.ClassIdle
	}
	return 10 * time.Minute
}

// closeIdle closes dc if it has been unused for the idle time, else looks
// again when it would have been.
func (f *Fleet) closeIdle(k dynKey, dc *dynClass) {
	idle := f.classIdle()
	f.mu.Lock()
	if f.dyn[k] != dc {
		f.mu.Unlock()
		return // closed already
	}
	if left := idle - time.Since(dc.last); dc.users > 0 || left > 0 {
		if dc.users > 0 {
			left = idle
		}
		dc.timer.Reset(left)
		f.mu.Unlock()
		return
	}
	delete(f.dyn, k)
	f.mu.Unlock()
	dc.close()
}

// CloseClass closes the classes made for environment env (its ID): the
// environment was removed. Sandboxes taken from them live on with their
// holders; the next run there makes the class again.
func (f *Fleet) CloseClass(env string) {
	var gone []*dynClass
	f.mu.Lock()
	for k, dc := range f.dyn {
		if k.env == env {
			delete(f.dyn, k)
			dc.timer.Stop()
			gone = append(gone, dc)
		}
	}
	f.mu.Unlock()
	for _, dc := range gone {
		dc.close()
	}
}

// envClassKey names an environment's class in Stats:
// "basic@env:<12 hex>", "gvisor/basic@env:<12 hex>".
func envClassKey(cs ClassSpec) string {
	id := cs.Env
	if len(id) > len("sha256:")+12 {
		id = id[len("sha256:") : len("sha256:")+12]
	}
	key := classKey(cs.Backend, cs.Name) + "@env:" + id
	if cs.Variant != "" {
		v := cs.Variant
		if len(v) > 8 {
			v = v[:8]
		}
		key += "." + v
	}
	return key
}
