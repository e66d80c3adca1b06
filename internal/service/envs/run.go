package envs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// Runs, sessions and commands started from an environment (envstore):
// the record looked up by name, its root, layer, Python and variables
// given to the sandbox (fleet.Work.FromEnvironment), its modules to the
// import policy, and its warm pool made on demand (fleet.TakeIn).

// Resolve is the environment name names ("": the operator's default,
// SANDBOX_DEFAULT_ENVIRONMENT; none: the host's root, the zero Env).
func (d *Envs) Resolve(name string) (envstore.Env, error) {
	if name == "" && d != nil {
		name = d.cfg.DefaultEnvironment
	}
	if name == "" {
		return envstore.Env{}, nil
	}
	if !envstore.NamePattern.MatchString(name) {
		return envstore.Env{}, fmt.Errorf("%w: environment %s: %v", errdefs.ErrInvalidRequest, bounded.Quote(name), envstore.ErrBadName)
	}
	var e envstore.Env
	err := envstore.ErrNotFound
	if d != nil && d.store != nil {
		e, err = d.store.Get(name)
	}
	switch {
	case errors.Is(err, envstore.ErrNotFound):
		return envstore.Env{}, fmt.Errorf("%w: %s (the operator builds environments with codecage env build; codecage env list shows them)", errdefs.ErrEnvironmentNotFound, bounded.Quote(name))
	case err != nil:
		return envstore.Env{}, fmt.Errorf("%w: environment %s: %v", errdefs.ErrUnavailable, bounded.Quote(name), err)
	}
	return e, nil
}

// WithModules lets an import policy import the environment's modules
// too, as the root's withLayer does the operator's layer's.
func WithModules(p policy.ImportPolicy, e envstore.Env) policy.ImportPolicy {
	if p.Modules == nil || len(e.Modules) == 0 {
		return p
	}
	mods := slices.Clone(p.Modules)
	for _, m := range e.Modules {
		if !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	p.Modules = mods
	return p
}

// class is the class of pooled sandboxes of environment e for runs of
// profile class name on backend: made by the fleet at its first use.
func (d *Envs) class(backend, name string, e envstore.Env) fleet.ClassSpec {
	c := d.cfg
	memory, dataScience := c.MemoryLimit, name == policy.DataScience
	if dataScience {
		memory = c.DataMemory
	}
	w := d.o.Pooled(memory, dataScience)
	w.Preimport = e.Preimport
	w = w.FromEnvironment(e)
	return fleet.ClassSpec{Backend: backend, Name: name, Ready: c.EnvPoolSize, Zygote: c.Zygote,
		Interpreter: w.Interpreter, Env: e.ID, Variant: variant(e), Spec: w.Spec()}
}

// variant tells apart records of one content (one ID) whose sandboxes
// start differently: their Python, preimports or variables.
func variant(e envstore.Env) string {
	b, _ := json.Marshal(struct {
		Root, Layer, Python string
		Preimport           []string
		Vars                map[string]string
	}{e.RootDir, e.LayerDir, e.Python, e.Preimport, e.Vars})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// TakeIn is a pooled sandbox for a stateless run from environment e: its
// class's, made on demand; pooled is false when none serves the run.
func (d *Envs) TakeIn(ctx context.Context, backend, class string, e envstore.Env, l fleet.Limits) (*fleet.Lease, bool, error) {
	return d.fleet.TakeIn(ctx, d.class(backend, class, e), l)
}

// forget ends the pools and zygotes of an environment that was removed
// (its ID).
func (d *Envs) forget(id string) {
	d.fleet.CloseClass(id)
}

// SessionIn is req as environment e shapes it: a session that names no
// home gets the environment's working directory as its home, when a
// sandbox can have it there (/workspace or /home/<name>).
func SessionIn(req session.Request, e envstore.Env) session.Request {
	// The session records the environment it got (the default one too):
	// its snapshots and forks start from that one.
	req.Environment = e.Name
	if req.Home == "" && e.Workdir != "" && e.Workdir != fleet.WorkspaceDir && fleet.CheckHome(e.Workdir) == nil {
		req.Home = e.Workdir
	}
	return req
}
