package envs

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// The operator's operations on the store: list, describe, remove,
// collect. The build itself: builds.go and build_*.go; its Python check:
// check.go; the use counts that keep a live sandbox's root from the
// collector: use.go.

// BuildRequest asks for a new environment. Exactly one source is set:
// Requirements (a Python packages layer over Base, or over the host's
// root), Debian (packages, with mmdebstrap), Image (an OCI image tarball,
// OCI layout or reference) or Dockerfile (with buildah).
type BuildRequest struct {
	Name string
	// Requirements are pip requirement lines; Base names the environment
	// the layer goes over ("": the host's root).
	Requirements []string
	Base         string
	// Debian are Debian packages; Suite the release ("": the host's).
	Debian []string
	Suite  string
	// Image is an image tarball (docker save, OCI archive), an OCI layout
	// directory, or a registry reference.
	Image string
	// Dockerfile is a Dockerfile's text; ContextDir its build context. A
	// FROM names an environment, or an image the build can reach.
	Dockerfile string
	ContextDir string
	// What the environment's sandboxes start with.
	Preimport []string
	StartCmd  string
	ReadyCmd  string
	Workdir   string
	Vars      map[string]string
	// Log receives the build's progress as it comes (nil: discarded).
	Log io.Writer `json:"-"`
}

// GCResult says what a collection of the environment store freed, and
// what it left for the sandboxes still using it.
type GCResult struct {
	Roots  int   `json:"roots" doc:"Root filesystems removed."`
	Layers int   `json:"layers" doc:"Python package layers removed."`
	Bytes  int64 `json:"bytes" doc:"Bytes freed."`
	// Deferred names removed environments whose sandboxes still run: the
	// collection waits for them to end.
	Deferred []string `json:"deferred,omitempty" doc:"IDs of removed environments still in use by running sandboxes; nothing was collected while they run."`
}

// List lists the environments (never nil).
func (d *Envs) List() ([]envstore.Env, error) {
	envs, err := d.store.List()
	if err != nil {
		return nil, fmt.Errorf("%w: environments: %v", errdefs.ErrUnavailable, err)
	}
	if envs == nil {
		envs = []envstore.Env{}
	}
	return envs, nil
}

// Remove deletes the environment named name and returns its record; its
// layers go at the next collection unless another environment uses them.
// Sandboxes running from it keep their root (their mounts hold it, and
// the collector skips what is in use); its pools and zygotes end now.
func (d *Envs) Remove(name string) (envstore.Env, error) {
	e, err := d.Get(name)
	if err != nil {
		return e, err
	}
	if err := d.store.Remove(name); err != nil {
		return e, envError(name, err)
	}
	d.forget(e.ID)
	return e, nil
}

// GC removes the roots and layers no environment uses. While a removed
// environment's sandboxes still run, it collects nothing and says which
// ones it waits for.
func (d *Envs) GC() (GCResult, error) {
	// Sandboxes start under the read side of this lock (InUse): none
	// starts on a root while the collector decides and deletes.
	d.use.gcMu.Lock()
	defer d.use.gcMu.Unlock()
	envs, err := d.store.List()
	if err != nil {
		return GCResult{}, fmt.Errorf("%w: environments: %v", errdefs.ErrUnavailable, err)
	}
	recorded := map[string]bool{}
	for _, e := range envs {
		recorded[e.ID] = true
	}
	var res GCResult
	inUse := d.use.ids()
	// A session holds its environment's root for its whole life.
	d.sessions.Each(func(se *session.Session) {
		if id := se.Environment().ID; id != "" && !slices.Contains(inUse, id) {
			inUse = append(inUse, id)
		}
	})
	slices.Sort(inUse)
	for _, id := range inUse {
		if !recorded[id] {
			res.Deferred = append(res.Deferred, id)
		}
	}
	if len(res.Deferred) > 0 {
		// The store collects by record only: an in-use root without one
		// would go. Nothing is collected until those sandboxes end.
		return res, nil
	}
	rep, err := d.store.GC()
	if err != nil {
		return GCResult{}, fmt.Errorf("%w: environments: collecting: %v", errdefs.ErrUnavailable, err)
	}
	res.Roots, res.Layers, res.Bytes = rep.Roots, rep.Layers, rep.Bytes
	return res, nil
}

// Get reads one record, its errors classified (envstore.ErrNotFound:
// none).
func (d *Envs) Get(name string) (envstore.Env, error) {
	e, err := d.store.Get(name)
	if err != nil {
		return e, envError(name, err)
	}
	return e, nil
}

// envError names the environment in a store error, keeping its class.
func envError(name string, err error) error {
	switch {
	case errors.Is(err, envstore.ErrNotFound):
		return fmt.Errorf("%w: %q (codecage env list shows them)", err, name)
	case errors.Is(err, envstore.ErrExists), errors.Is(err, envstore.ErrBadName), errors.Is(err, envstore.ErrBadImage):
		return fmt.Errorf("environment %q: %w", name, err)
	}
	return fmt.Errorf("%w: environment %q: %v", errdefs.ErrUnavailable, name, err)
}

// Exists reports whether an environment of that name exists.
func (d *Envs) Exists(name string) bool {
	if !envstore.NamePattern.MatchString(name) {
		return false
	}
	_, err := d.store.Get(name)
	return err == nil
}
