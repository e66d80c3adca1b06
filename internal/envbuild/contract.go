package envbuild

// Stubs of envbuild's contract, so that the service builds against it
// until the real functions land (the lead drops this file at merge).

import (
	"context"
	"errors"
	"io"
)

var errNotBuilt = errors.New("envbuild: not built yet")

// DebianOptions are a Debian root's recipe.
type DebianOptions struct {
	Suite    string
	Mirror   string
	Packages []string
}

// Debian builds a root filesystem of Debian packages into dstRoot.
func Debian(ctx context.Context, o DebianOptions, dstRoot string, log io.Writer) error {
	return errNotBuilt
}

// DockerfileOptions are a Dockerfile build's inputs. Bases resolves a
// FROM to the root directory of an existing environment.
type DockerfileOptions struct {
	Dockerfile string
	ContextDir string
	Bases      func(from string) (rootDir string, ok bool)
}

// Dockerfile builds the Dockerfile into an OCI archive at dstOCIArchive.
func Dockerfile(ctx context.Context, o DockerfileOptions, dstOCIArchive string, log io.Writer) error {
	return errNotBuilt
}
