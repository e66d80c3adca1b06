package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/session"
)

// Environments: named read-only roots the operator builds once
// (envstore), which runs, sessions and E2B templates start from. Every
// operation here is the operator's (operator.go). The build itself:
// envbuild_*.go; its Python check: envcheck.go; the use counts that keep
// a live sandbox's root from the collector: envuse.go.

// EventEnvironment is the audit kind of environment builds, removals and
// collections.
const EventEnvironment = "environment"

// The environment operations (rows of ops); they run where they are asked.
const (
	opEnvBuild  = "environment_build"
	opEnvList   = "environment_list"
	opEnvGet    = "environment_get"
	opEnvRemove = "environment_remove"
	opEnvGC     = "environment_gc"
)

// EnvironmentBuild asks for a new environment. Exactly one source is set:
// Requirements (a Python packages layer over Base, or over the host's
// root), Debian (packages, with mmdebstrap), Image (an OCI image tarball,
// OCI layout or reference) or Dockerfile (with buildah).
type EnvironmentBuild struct {
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

// BuildEnvironment builds b, records it and returns it; a failed build
// leaves nothing behind. Operators only.
func (s *Service) BuildEnvironment(ctx context.Context, b EnvironmentBuild) (envstore.Env, error) {
	return do(ctx, s, opEnvBuild, call[envstore.Env]{
		code: bounded.String(b.Name, 100),
		check: func() error {
			if err := s.requireOperator(ctx); err != nil {
				return err
			}
			return checkBuild(&b)
		},
		run: func(ctx context.Context) (envstore.Env, error) { return s.buildEnvironment(ctx, b) },
		success: func(e envstore.Env, took time.Duration) Event {
			return Event{Kind: EventEnvironment, Action: "build", Code: e.Name, Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s %s from %s (%d bytes, Python %s)", e.Name, e.ID, e.Source.Kind, e.Size, e.PythonVersion)}
		},
	})
}

// Environments lists the environments. Operators only.
func (s *Service) Environments(ctx context.Context) ([]envstore.Env, error) {
	return do(ctx, s, opEnvList, call[[]envstore.Env]{
		check: func() error { return s.requireOperator(ctx) },
		run: func(context.Context) ([]envstore.Env, error) {
			envs, err := s.envs.List()
			if err != nil {
				return nil, fmt.Errorf("%w: environments: %v", ErrUnavailable, err)
			}
			if envs == nil {
				envs = []envstore.Env{}
			}
			return envs, nil
		},
	})
}

// Environment describes one environment (envstore.ErrNotFound: none).
// Operators only.
func (s *Service) Environment(ctx context.Context, name string) (envstore.Env, error) {
	return do(ctx, s, opEnvGet, call[envstore.Env]{
		check: func() error {
			if err := s.requireOperator(ctx); err != nil {
				return err
			}
			return checkEnvName(name)
		},
		run: func(context.Context) (envstore.Env, error) { return s.getEnvironment(name) },
	})
}

// RemoveEnvironment deletes an environment; its layers go at the next
// garbage collection unless another environment uses them. Sandboxes
// running from it keep their root (their mounts hold it, and the
// collector skips what is in use). Operators only.
func (s *Service) RemoveEnvironment(ctx context.Context, name string) error {
	_, err := do(ctx, s, opEnvRemove, call[envstore.Env]{
		code: bounded.String(name, 100),
		check: func() error {
			if err := s.requireOperator(ctx); err != nil {
				return err
			}
			return checkEnvName(name)
		},
		run: func(context.Context) (envstore.Env, error) {
			e, err := s.getEnvironment(name)
			if err != nil {
				return e, err
			}
			if err := s.envs.Remove(name); err != nil {
				return e, envError(name, err)
			}
			// Its pools and zygotes end now; its sessions run on.
			s.forgetEnvironment(e.ID)
			return e, nil
		},
		success: func(e envstore.Env, took time.Duration) Event {
			return Event{Kind: EventEnvironment, Action: "remove", Code: e.Name, Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s %s (in use by %d sandboxes)", e.Name, e.ID, s.envUse.count(e.ID))}
		},
	})
	return err
}

// CollectEnvironments removes the roots and layers no environment uses.
// While a removed environment's sandboxes still run, it collects nothing
// and says which ones it waits for. Operators only.
func (s *Service) CollectEnvironments(ctx context.Context) (GCResult, error) {
	return do(ctx, s, opEnvGC, call[GCResult]{
		check: func() error { return s.requireOperator(ctx) },
		run:   func(context.Context) (GCResult, error) { return s.collectEnvironments() },
		success: func(r GCResult, took time.Duration) Event {
			detail := fmt.Sprintf("%d roots, %d layers, %d bytes freed", r.Roots, r.Layers, r.Bytes)
			if len(r.Deferred) > 0 {
				detail = "deferred: in use: " + strings.Join(r.Deferred, ",")
			}
			return Event{Kind: EventEnvironment, Action: "gc", Outcome: "success", Duration: took, Detail: detail}
		},
	})
}

func (s *Service) collectEnvironments() (GCResult, error) {
	// Sandboxes start under the read side of this lock (envInUse): none
	// starts on a root while the collector decides and deletes.
	s.envUse.gcMu.Lock()
	defer s.envUse.gcMu.Unlock()
	envs, err := s.envs.List()
	if err != nil {
		return GCResult{}, fmt.Errorf("%w: environments: %v", ErrUnavailable, err)
	}
	recorded := map[string]bool{}
	for _, e := range envs {
		recorded[e.ID] = true
	}
	var res GCResult
	inUse := s.envUse.ids()
	// A session holds its environment's root for its whole life.
	s.sessions.Each(func(se *session.Session) {
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
	rep, err := s.envs.GC()
	if err != nil {
		return GCResult{}, fmt.Errorf("%w: environments: collecting: %v", ErrUnavailable, err)
	}
	res.Roots, res.Layers, res.Bytes = rep.Roots, rep.Layers, rep.Bytes
	return res, nil
}

// getEnvironment reads one record, its errors classified.
func (s *Service) getEnvironment(name string) (envstore.Env, error) {
	e, err := s.envs.Get(name)
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
	return fmt.Errorf("%w: environment %q: %v", ErrUnavailable, name, err)
}

// EnvironmentExists reports whether an environment of that name exists.
// Every caller may ask (a run or a session may name one, an E2B client
// asks Template.exists); the record itself is the operators'.
func (s *Service) EnvironmentExists(ctx context.Context, name string) bool {
	if !envstore.NamePattern.MatchString(name) {
		return false
	}
	_, err := s.envs.Get(name)
	return err == nil
}
