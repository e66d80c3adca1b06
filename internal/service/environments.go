package service

import (
	"context"
	"errors"
	"io"

	"github.com/codecage/codecage/internal/envstore"
)

// Environments: named read-only roots the operator builds once
// (envstore), which runs, sessions and E2B templates start from.

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

// errEnvironmentsNotBuilt is what the environment operations answer until
// they are built.
var errEnvironmentsNotBuilt = errors.New("environments are not available yet")

// BuildEnvironment builds b, records it and returns it; a failed build
// leaves nothing behind.
func (s *Service) BuildEnvironment(ctx context.Context, b EnvironmentBuild) (envstore.Env, error) {
	return envstore.Env{}, errEnvironmentsNotBuilt
}

// Environments lists the environments.
func (s *Service) Environments(ctx context.Context) ([]envstore.Env, error) {
	return nil, errEnvironmentsNotBuilt
}

// Environment describes one environment (envstore.ErrNotFound: none).
func (s *Service) Environment(ctx context.Context, name string) (envstore.Env, error) {
	return envstore.Env{}, errEnvironmentsNotBuilt
}

// RemoveEnvironment deletes an environment; its layers go at the next
// garbage collection unless another environment uses them.
func (s *Service) RemoveEnvironment(ctx context.Context, name string) error {
	return errEnvironmentsNotBuilt
}
