package service

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// The operator's package layer (codecage packages install): one directory
// of packages, bound read-only into every sandbox at fleet.PackagesDir,
// whose modules every run may import.

const layerID = "packages"

// PackagesDir is where the operator's layer lives on the host.
func (s *Service) PackagesDir() string {
	if s.cfg.PackagesDir != "" {
		return s.cfg.PackagesDir
	}
	return filepath.Join(s.cfg.StateDir, "packages")
}

// loadLayer finds the layer's packages when the service starts.
func (s *Service) loadLayer() {
	dir := s.PackagesDir()
	pkgs := installedPackages(dir)
	if len(pkgs) == 0 {
		return
	}
	s.layerBinds = []fleet.Bind{{Host: dir, Path: fleet.PackagesDir}}
	for _, p := range pkgs {
		for _, m := range p.Modules {
			if !slices.Contains(s.layerModules, m) {
				s.layerModules = append(s.layerModules, m)
			}
		}
	}
}

// withLayer lets an import policy import the layer's modules too.
func (s *Service) withLayer(p policy.ImportPolicy) policy.ImportPolicy {
	if p.Modules == nil || len(s.layerModules) == 0 {
		return p
	}
	p.Modules = append(slices.Clone(p.Modules), s.layerModules...)
	return p
}

// LayerPackages lists the operator's layer.
func (s *Service) LayerPackages() []InstalledPackage {
	out := []InstalledPackage{}
	for _, p := range installedPackages(s.PackagesDir()) {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b InstalledPackage) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// InstallLayerPackage installs a package into the operator's layer, with
// the same checks and the same jail as pip_install. Running services see
// it once restarted.
func (s *Service) InstallLayerPackage(ctx context.Context, pkg, version string) (*InstallResult, error) {
	start := time.Now()
	r, err := policy.ParseRequirement(pkg, version)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	dir := s.PackagesDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	// The layer is one more "session" as far as pip is concerned: its own
	// directory, written by pip in a jail.
	se := pipTarget{id: layerID, site: dir}
	if os.Geteuid() == 0 {
		// pip runs as a sandbox uid: the layer is that uid's while it does
		// (others read it; nothing in a sandbox writes it afterwards).
		uid, err := fleet.ReserveUID()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		se.uid = uid
		defer fleet.ReleaseUID(uid)
		_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				_ = os.Lchown(p, se.uid, se.uid)
			}
			return nil
		})
		_ = os.Chmod(dir, 0o755)
	}
	return s.installInto(ctx, se, r, start)
}
