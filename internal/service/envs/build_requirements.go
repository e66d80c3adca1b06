package envs

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/report"
)

// buildRequirements installs the requirements into the staging layer with
// pip, in the jail pip_install uses (its only way out the egress proxy to
// the index, or none with a wheelhouse), over the base environment's root
// or the host's. The environment's root is the base's.
func (d *Envs) buildRequirements(ctx context.Context, eb *envBuild) error {
	b := eb.b
	eb.meta.Source = envstore.Source{Kind: "requirements", Ref: b.Base, Packages: b.Requirements}
	interpreter, err := d.overBase(eb)
	if err != nil {
		return err
	}
	reqs, err := d.requirements(ctx, b.Requirements)
	if err != nil {
		return err
	}
	layer := eb.st.Layer()
	if err := os.MkdirAll(layer, 0o755); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if err := d.pipInto(ctx, eb, layer, interpreter, reqs); err != nil {
		return err
	}
	return d.layerModules(eb, layer)
}

// overBase takes the build's base environment, if any, holding a use of
// it, and returns the Python pip runs on: the base's, or the host's.
func (d *Envs) overBase(eb *envBuild) (string, error) {
	b := eb.b
	interpreter := d.cfg.Interpreter
	if interpreter == "" {
		interpreter = fleet.DefaultInterpreter
	}
	if b.Base == "" {
		return interpreter, nil
	}
	base, release, err := d.Use(b.Base)
	if err != nil {
		return "", fmt.Errorf("base: %w", err)
	}
	eb.uses = append(eb.uses, release)
	if base.LayerDir != "" {
		return "", fmt.Errorf("%w: environment %s: its base %s has a Python packages layer of its own; layers do not stack: build one environment with both requirement lists", errdefs.ErrInvalidRequest, b.Name, base.Name)
	}
	eb.meta.Base, eb.meta.RootDir, eb.meta.Python = base.Name, base.RootDir, base.Python
	// Its root's modules are this one's too (the layer's join them).
	eb.meta.Modules = slices.Clone(base.Modules)
	return base.Python, nil
}

// requirements are the build's lines as pip gets them, once each passed
// the package policy and the index's precheck.
func (d *Envs) requirements(ctx context.Context, lines []string) ([]string, error) {
	var reqs []string
	for _, l := range lines {
		r, err := parseRequirementLine(l)
		if err != nil {
			return nil, fmt.Errorf("%w: requirement %s: %v", errdefs.ErrInvalidRequest, bounded.Quote(l), err)
		}
		if err := policy.CheckBlocked(r, d.cfg.BlockedPackages); err != nil {
			return nil, fmt.Errorf("%w: requirement %s: %s", errdefs.ErrInvalidRequest, bounded.Quote(l), strings.TrimPrefix(err.Error(), policy.ErrBadPackage.Error()+": "))
		}
		if kind, msg := d.o.Pip.Precheck(ctx, r); kind != "" {
			return nil, fmt.Errorf("%w: requirement %s: %s", errdefs.ErrBuildFailed, bounded.Quote(l), msg)
		}
		reqs = append(reqs, r.String())
	}
	return reqs, nil
}

// pipInto runs pip for reqs into layer, on interpreter over the build's
// root, and says how it failed.
func (d *Envs) pipInto(ctx context.Context, eb *envBuild, layer, interpreter string, reqs []string) error {
	target := PipTarget{ID: "environment " + eb.b.Name, Site: layer, Interpreter: interpreter, Root: eb.meta.RootDir,
		MaxInstall: d.cfg.EnvMaxLayer, Log: eb.log}
	if dl, ok := ctx.Deadline(); ok {
		target.Timeout = time.Until(dl)
	}
	if os.Geteuid() == 0 {
		// pip runs as a sandbox uid, which owns the layer while it does;
		// the layer is root's again before it is checked and recorded.
		uid, err := fleet.ReserveUID()
		if err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		defer fleet.ReleaseUID(uid)
		target.UID = uid
		if err := os.Chown(layer, uid, uid); err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
	}
	eb.log.printf("pip install %s", strings.Join(reqs, " "))
	out, exit, err := d.o.Pip.Install(ctx, target, reqs)
	if err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := ownByRoot(layer); err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
	}
	switch {
	case exit.Limit == fleet.LimitTimeout || exit.Limit == fleet.LimitCPU:
		return fmt.Errorf("%w: pip did not finish in time", errdefs.ErrBuildFailed)
	case exit.Limit == fleet.LimitCanceled:
		return fmt.Errorf("%w", context.Canceled)
	case exit.ExitCode != 0 || exit.Limit != fleet.LimitNone:
		return fmt.Errorf("%w: %s", errdefs.ErrBuildFailed, pipBuildFailure(out, d.cfg.PipMaxDownload, d.cfg.EnvMaxLayer))
	}
	return nil
}

// layerModules records the modules of what pip installed into layer
// (with the base's), refusing a dependency the package policy blocks.
func (d *Envs) layerModules(eb *envBuild, layer string) error {
	installed := d.o.Pip.Installed(layer)
	modules := eb.meta.Modules
	for _, p := range installed {
		dep := policy.Requirement{Name: p.Name, Normalized: policy.NormalizePackageName(p.Name)}
		if err := policy.CheckBlocked(dep, d.cfg.BlockedPackages); err != nil {
			return fmt.Errorf("%w: the requirements need %s, which is blocked by the operator's package policy (SANDBOX_BLOCKED_PACKAGES)", errdefs.ErrBuildFailed, p.Name)
		}
		for _, m := range p.Modules {
			if !slices.Contains(modules, m) {
				modules = append(modules, m)
			}
		}
	}
	sort.Strings(modules)
	eb.meta.Modules = modules
	eb.log.printf("installed %d distributions, modules: %s", len(installed), bounded.String(strings.Join(modules, " "), 1000))
	return nil
}

var noDistribution = regexp.MustCompile(`No matching distribution found for (\S{1,200})`)

// pipBuildFailure names a failed install of several requirements.
func pipBuildFailure(log string, download, install int64) string {
	switch {
	case strings.Contains(log, "No space left on device") || strings.Contains(log, "Errno 28") || strings.Contains(log, "File too large"):
		return fmt.Sprintf("the packages are too large: downloads are limited to %d bytes (SANDBOX_PIP_MAX_DOWNLOAD) and an environment's layer to %d (SANDBOX_ENV_MAX_LAYER)", download, install)
	case strings.Contains(log, "ResolutionImpossible") || strings.Contains(log, "conflicting dependencies"):
		return "the requirements conflict; see the log"
	}
	if m := noDistribution.FindStringSubmatch(log); m != nil {
		return fmt.Sprintf("no wheel found for %s (a requirement or one of its dependencies)", bounded.Quote(m[1]))
	}
	return "pip failed: " + bounded.Quote(strings.TrimSpace(report.Tail(log, 400)))
}

// ownByRoot gives a tree built by a sandbox uid to root, without write
// bits for group and others: nothing but the operator changes it now.
func ownByRoot(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, 0, 0); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()&^0o022)
	})
}
