package service

import (
	"context"
	"slices"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/packages"
)

// The operator's package layer (codecage packages install) is the
// packages domain's; the root binds it into every sandbox and lets every
// run import its modules.

// PackagesDir is where the operator's layer lives on the host.
func (s *Service) PackagesDir() string { return packages.Dir(s.cfg) }

// loadLayer finds the layer's packages when the service starts.
func (s *Service) loadLayer() {
	s.layerBinds, s.layerModules = packages.LoadLayer(s.PackagesDir())
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
func (s *Service) LayerPackages() []InstalledPackage { return s.pkgs.Layer() }

// InstallLayerPackage installs a package into the operator's layer, with
// the same checks and the same jail as pip_install. Running services see
// it once restarted.
func (s *Service) InstallLayerPackage(ctx context.Context, pkg, version string) (*InstallResult, error) {
	return s.pkgs.InstallLayer(ctx, pkg, version)
}
