package service

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
)

// buildRequirements installs the requirements into the staging layer with
// pip, in the jail pip_install uses (its only way out the egress proxy to
// the index, or none with a wheelhouse), over the base environment's root
// or the host's. The environment's root is the base's.
func (s *Service) buildRequirements(ctx context.Context, eb *envBuild) error {
	b := eb.b
	eb.meta.Source = envstore.Source{Kind: "requirements", Ref: b.Base, Packages: b.Requirements}
	interpreter := s.cfg.Interpreter
	if interpreter == "" {
		interpreter = fleet.DefaultInterpreter
	}
	if b.Base != "" {
		base, release, err := s.useEnvironment(b.Base)
		if err != nil {
			return fmt.Errorf("base: %w", err)
		}
		eb.uses = append(eb.uses, release)
		if base.LayerDir != "" {
			return fmt.Errorf("%w: environment %s: its base %s has a Python packages layer of its own; layers do not stack: build one environment with both requirement lists", ErrInvalidRequest, b.Name, base.Name)
		}
		eb.meta.Base, eb.meta.RootDir, eb.meta.Python = base.Name, base.RootDir, base.Python
		interpreter = base.Python
	}
	var reqs []string
	for _, l := range b.Requirements {
		r, err := parseRequirementLine(l)
		if err != nil {
			return fmt.Errorf("%w: requirement %s: %v", ErrInvalidRequest, Quote(l), err)
		}
		if err := policy.CheckBlocked(r, s.cfg.BlockedPackages); err != nil {
			return fmt.Errorf("%w: requirement %s: %s", ErrInvalidRequest, Quote(l), strings.TrimPrefix(err.Error(), policy.ErrBadPackage.Error()+": "))
		}
		if kind, msg := s.precheck(ctx, r); kind != "" {
			return fmt.Errorf("%w: requirement %s: %s", ErrBuildFailed, Quote(l), msg)
		}
		reqs = append(reqs, r.String())
	}
	layer := eb.st.Layer()
	if err := os.MkdirAll(layer, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	target := pipTarget{id: "environment " + b.Name, site: layer, interpreter: interpreter, root: eb.meta.RootDir,
		maxInstall: s.cfg.EnvMaxLayer, log: eb.log}
	if d, ok := ctx.Deadline(); ok {
		target.timeout = time.Until(d)
	}
	if os.Geteuid() == 0 {
		// pip runs as a sandbox uid, which owns the layer while it does;
		// the layer is root's again before it is checked and recorded.
		uid, err := fleet.ReserveUID()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		defer fleet.ReleaseUID(uid)
		target.uid = uid
		if err := os.Chown(layer, uid, uid); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	eb.log.printf("pip install %s", strings.Join(reqs, " "))
	out, exit, _, err := s.runPip(ctx, target, reqs)
	if err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := ownByRoot(layer); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	switch {
	case exit.Limit == fleet.LimitTimeout || exit.Limit == fleet.LimitCPU:
		return fmt.Errorf("%w: pip did not finish in time", ErrBuildFailed)
	case exit.Limit == fleet.LimitCanceled:
		return fmt.Errorf("%w", context.Canceled)
	case exit.ExitCode != 0 || exit.Limit != fleet.LimitNone:
		return fmt.Errorf("%w: %s", ErrBuildFailed, pipBuildFailure(out, s.cfg.PipMaxDownload, s.cfg.EnvMaxLayer))
	}
	installed := installedPackages(layer)
	var modules []string
	for _, p := range installed {
		dep := policy.Requirement{Name: p.Name, Normalized: policy.NormalizePackageName(p.Name)}
		if err := policy.CheckBlocked(dep, s.cfg.BlockedPackages); err != nil {
			return fmt.Errorf("%w: the requirements need %s, which is blocked by the operator's package policy (SANDBOX_BLOCKED_PACKAGES)", ErrBuildFailed, p.Name)
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
		return fmt.Sprintf("no wheel found for %s (a requirement or one of its dependencies)", Quote(m[1]))
	}
	return "pip failed: " + Quote(strings.TrimSpace(tail(log, 400)))
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
