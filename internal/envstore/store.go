package envstore

import (
	"fmt"
	"os"
	"path/filepath"
)

// Store keeps the environments under one directory: roots/, layers/,
// envs/ (the records) and staging/ (builds in progress).
type Store struct {
	dir string
	// Limits cap what one image import may unpack; Open sets
	// DefaultLimits, a caller may lower them before a build.
	Limits Limits
}

// Limits cap an image import, so a hostile image is refused early
// instead of filling the disk.
type Limits struct {
	// MaxBytes is the total bytes of file content over all layers.
	MaxBytes int64
	// MaxEntries is the total tar entries over all layers.
	MaxEntries int64
	// MaxPathDepth is the most components an entry's path may have.
	MaxPathDepth int
	// MaxLayers is the most layers an image may have.
	MaxLayers int
}

// DefaultLimits are generous for real images (a CUDA image is ~6 GiB)
// and still bound a bomb.
var DefaultLimits = Limits{MaxBytes: 8 << 30, MaxEntries: 2_000_000, MaxPathDepth: 128, MaxLayers: 128}

// The store's subdirectories.
const (
	rootsDir   = "roots"
	layersDir  = "layers"
	envsDir    = "envs"
	stagingDir = "staging"
)

// Open opens (making it when missing) the store at dir and sweeps the
// staging left by builds that never finished.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("envstore: %w", err)
	}
	// The store itself is the operator's alone; roots keep 0755 inside
	// it because sandboxes read them through bind mounts, not this path.
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("envstore: %w", err)
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("envstore: %w", err)
	}
	for _, sub := range []string{rootsDir, layersDir, envsDir, stagingDir} {
		if err := os.MkdirAll(filepath.Join(abs, sub), 0o755); err != nil {
			return nil, fmt.Errorf("envstore: %w", err)
		}
	}
	s := &Store{dir: abs, Limits: DefaultLimits}
	if err := s.sweepStaging(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(parts ...string) string {
	return filepath.Join(append([]string{s.dir}, parts...)...)
}

// checkName refuses a name outside NamePattern (it becomes a file name).
func checkName(name string) error {
	if !NamePattern.MatchString(name) {
		return ErrBadName
	}
	return nil
}
