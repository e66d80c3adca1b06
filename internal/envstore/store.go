package envstore

import (
	"context"
	"errors"
	"io"
)

// errNotBuilt marks the stubs of the contract, until the store is built.
var errNotBuilt = errors.New("envstore: not built yet")

// Store keeps the environments under one directory: roots/, layers/,
// envs/ (the records) and staging/ (builds in progress).
type Store struct {
	dir string
}

// Open opens (making it when missing) the store at dir and sweeps the
// staging left by builds that never finished.
func Open(dir string) (*Store, error) { return &Store{dir: dir}, nil }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Get returns the environment named name (ErrNotFound: none).
func (s *Store) Get(name string) (Env, error) { return Env{}, ErrNotFound }

// List returns every environment, by name.
func (s *Store) List() ([]Env, error) { return nil, nil }

// Remove deletes the record of name; GC frees what no record uses.
func (s *Store) Remove(name string) error { return ErrNotFound }

// GCReport says what a collection freed.
type GCReport struct {
	Roots, Layers int
	Bytes         int64
}

// GC removes roots and layers no record uses.
func (s *Store) GC() (GCReport, error) { return GCReport{}, errNotBuilt }

// Staging is one build in progress: a root and a layer directory that
// become an environment at Commit, or vanish at Abort.
type Staging struct {
	dir string
}

// Stage starts a build.
func (s *Store) Stage() (*Staging, error) { return nil, errNotBuilt }

// Root is where the build puts its root filesystem (left empty: the
// environment has none of its own).
func (st *Staging) Root() string { return st.dir + "/root" }

// Layer is where the build puts its Python packages layer (left empty: none).
func (st *Staging) Layer() string { return st.dir + "/layer" }

// Abort removes everything the build made.
func (st *Staging) Abort() {}

// ImageConfig is what an image says its containers start with.
type ImageConfig struct {
	Env        []string
	WorkingDir string
	Entrypoint []string
	Cmd        []string
}

// ImportImage unpacks the image at ref (an image tarball, an OCI layout
// directory, or a reference the host can reach) into st.Root(): layers in
// order, whiteouts honoured, nothing executed, every entry checked
// (ErrBadImage).
func (s *Store) ImportImage(ctx context.Context, st *Staging, ref string, log io.Writer) (ImageConfig, error) {
	return ImageConfig{}, errNotBuilt
}

// Commit hashes the staging's root and layer, moves them into place (or
// keeps the identical ones already there), and records meta under its
// name, filling ID, RootDir, LayerDir and Size.
func (s *Store) Commit(st *Staging, meta Env) (Env, error) { return Env{}, errNotBuilt }
