package packages

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// The operator's package layer (codecage packages install): one directory
// of packages, bound read-only into every sandbox at fleet.PackagesDir,
// whose modules every run may import.

const layerID = "packages"

// Dir is where the operator's layer lives on the host.
func Dir(cfg config.Config) string {
	if cfg.PackagesDir != "" {
		return cfg.PackagesDir
	}
	return filepath.Join(cfg.StateDir, "packages")
}

// LoadLayer finds the layer's packages in dir when the service starts:
// the bind of every sandbox, and the modules every run may import (none
// when the layer is empty).
func LoadLayer(dir string) (binds []fleet.Bind, modules []string) {
	pkgs := Installed(dir)
	if len(pkgs) == 0 {
		return nil, nil
	}
	binds = []fleet.Bind{{Host: dir, Path: fleet.PackagesDir}}
	for _, p := range pkgs {
		for _, m := range p.Modules {
			if !slices.Contains(modules, m) {
				modules = append(modules, m)
			}
		}
	}
	return binds, modules
}

// Layer lists the operator's layer.
func (p *Packages) Layer() []InstalledPackage {
	out := []InstalledPackage{}
	for _, pkg := range Installed(Dir(p.cfg)) {
		out = append(out, pkg)
	}
	slices.SortFunc(out, func(a, b InstalledPackage) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// InstallLayer installs a package into the operator's layer, with the
// same checks and the same jail as pip_install. Running services see it
// once restarted.
func (p *Packages) InstallLayer(ctx context.Context, pkg, version string) (*InstallResult, error) {
	start := time.Now()
	r, err := policy.ParseRequirement(pkg, version)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidRequest, err)
	}
	dir := Dir(p.cfg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	// The layer is one more "session" as far as pip is concerned: its own
	// directory, written by pip in a jail.
	t := Target{ID: layerID, Site: dir}
	if os.Geteuid() == 0 {
		// pip runs as a sandbox uid: the layer is that uid's while it does
		// (others read it; nothing in a sandbox writes it afterwards).
		uid, err := fleet.ReserveUID()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		t.UID = uid
		defer fleet.ReleaseUID(uid)
		_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				_ = os.Lchown(p, t.UID, t.UID)
			}
			return nil
		})
		_ = os.Chmod(dir, 0o755)
	}
	return p.install(ctx, t, r, start)
}
