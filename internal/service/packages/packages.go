// Package packages is the service's packages domain: pip_install into a
// session's own package directory, the operator's package layer (codecage
// packages install), and pip itself, run in a jail whose only way out is
// the egress proxy to the configured index. It is plain logic over the
// fleet and the sessions the root resolved: the service's root admits,
// forwards and audits each request, and holds the session's run lock.
package packages

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/report"
	"github.com/codecage/codecage/internal/session"
)

// Options are what the packages domain is given by the service's root.
type Options struct {
	Config config.Config
	Fleet  *fleet.Fleet
	// Caps are the operator's bounds every sandbox shares.
	Caps fleet.Caps
	// FleetError says what a failure to get a sandbox means to the caller.
	FleetError func(ctx context.Context, err error) error
	// Proxy starts an egress proxy under pol for the sandbox label: pip's
	// only way out, to the index.
	Proxy func(pol egress.Policy, label string) (*egress.Proxy, *fleet.Forward)
}

// Packages installs packages. It is safe for concurrent use.
type Packages struct {
	o   Options
	cfg config.Config
}

// New returns the packages domain.
func New(o Options) *Packages { return &Packages{o: o, cfg: o.Config} }

// Parse checks an install request, before its session is looked up.
func Parse(req InstallRequest) (policy.Requirement, error) {
	r, err := policy.ParseRequirement(req.Package, req.Version)
	if err != nil {
		return policy.Requirement{}, fmt.Errorf("%w: %v", errdefs.ErrInvalidRequest, err)
	}
	if req.SessionID == "" {
		return policy.Requirement{}, fmt.Errorf("%w: installing a package needs a session_id: packages go into that session's own package directory (create a session first); the operator installs packages for every sandbox with codecage packages install", errdefs.ErrInvalidRequest)
	}
	return r, nil
}

// Install installs r (wheels only) into session se's own package
// directory; the session's later runs can import it. The caller holds
// se's run lock: one request at a time per session, as for its
// interpreter (a run's own %pip line holds it already). start is when
// the request came.
func (p *Packages) Install(ctx context.Context, se *session.Session, r policy.Requirement, start time.Time) (*InstallResult, error) {
	_, site, uid, _ := se.Workspace()
	if site == "" {
		return nil, fmt.Errorf("%w: session %s has no package directory", errdefs.ErrSessionEnded, se.ID())
	}
	target := Target{ID: se.ID(), Site: site, UID: uid, Allow: se.Allow}
	if env := se.Environment(); env.RootDir != "" {
		// An environment's own root: its Python's pip, in a sandbox from
		// that root, so that the wheels chosen match its Python. (Over
		// the host's root, a requirements layer, the host's pip is it.)
		target.Interpreter, target.Root, target.Env = env.Python, env.RootDir, env.Name
	}
	res, err := p.install(ctx, target, r, start)
	if res != nil {
		if similar, ok := policy.Typosquat(r.Normalized); ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("typosquat: %q looks like the popular package %q; check that this is the package you mean", r.Name, similar))
		}
	}
	return res, err
}

// Target is where pip installs: a session's package directory, the
// operator's layer, or an environment's (each one more "session" as far as
// pip is concerned).
type Target struct {
	ID   string // the session's, layerID, or the environment's name
	Site string // the directory pip installs into
	UID  int    // the host uid pip runs as (0: one of its own)
	// Allow lets the session import what was installed; nil for a layer.
	Allow func(modules []string)
	// An environment's build sets these: the Python and root pip runs on
	// ("": the host's), its bounds (0: the pip_install ones), and a copy
	// of pip's output as it comes.
	Interpreter, Root string
	// Env names the environment whose root it is, for errors.
	Env        string
	Timeout    time.Duration
	MaxInstall int64
	Log        io.Writer
}

// install runs pip for r into t's package directory (a session's, its run
// lock held, or the layer's) and reads what it installed.
func (p *Packages) install(ctx context.Context, t Target, r policy.Requirement, start time.Time) (*InstallResult, error) {
	res := &InstallResult{Package: r.Name, Warnings: []string{}, Installed: []InstalledPackage{}}
	fail := func(kind, msg string) (*InstallResult, error) {
		res.Error, res.Message = &kind, msg
		res.InstallationTime = time.Since(start).Seconds()
		return res, nil
	}
	if err := policy.CheckBlocked(r, p.cfg.BlockedPackages); err != nil {
		return fail(InstallBlocked, blockedMessage(err))
	}
	if kind, msg := p.Precheck(ctx, r); kind != "" {
		return fail(kind, msg)
	}
	before := Installed(t.Site)
	log, exit, id, err := p.RunPip(ctx, t, []string{r.String()})
	if err != nil {
		return nil, err
	}
	res.ExecutionID = id
	res.Log = report.Tail(log, 4096)
	if kind, msg, err := p.pipEnded(t, r, log, exit); err != nil || kind != "" {
		if err != nil {
			return nil, err
		}
		return fail(kind, msg)
	}
	// An upgrade in a target directory leaves the old version's metadata
	// beside the new: keep what pip says it installed.
	pruneStaleMetadata(t.Site, pipInstalled(log))
	after := Installed(t.Site)
	added := addedPackages(before, after)
	// A dependency may be blocked too: nothing blocked stays installed.
	for _, dep := range added {
		d := policy.Requirement{Name: dep.Name, Normalized: policy.NormalizePackageName(dep.Name)}
		if err := policy.CheckBlocked(d, p.cfg.BlockedPackages); err != nil {
			removeDistribution(t.Site, dep.Name)
			return fail(InstallBlocked, fmt.Sprintf("%s needs %s, which is blocked by the operator's package policy (SANDBOX_BLOCKED_PACKAGES); it was removed", r.Name, dep.Name))
		}
	}
	installed(res, t, r, after, added)
	res.InstallationTime = time.Since(start).Seconds()
	return res, nil
}

// pipEnded judges how pip ended: a kind of failure and its message, an
// error of the request, or neither (it installed).
func (p *Packages) pipEnded(t Target, r policy.Requirement, log string, exit fleet.Exit) (kind, msg string, err error) {
	switch {
	case exit.Limit == fleet.LimitTimeout || exit.Limit == fleet.LimitCPU:
		return InstallTimeout, fmt.Sprintf("pip did not finish within %s (SANDBOX_PIP_TIMEOUT)", p.cfg.PipTimeout), nil
	case exit.Limit == fleet.LimitCanceled:
		return InstallFailed, "canceled", nil
	case exit.ExitCode != 0 && t.Root != "" && noPipModule.MatchString(log):
		return "", "", fmt.Errorf("%w: pip_install: the Python of environment %s (%s) has no pip module; packages for a session from it must be installed by its own Python's pip (the host's could pick wheels for another Python): the operator builds the environment with pip (Debian's python3-pip, or an image whose Python has pip), or with the packages in it",
			errdefs.ErrInvalidRequest, bounded.Quote(t.Env), t.Interpreter)
	case exit.ExitCode != 0 || exit.Limit != fleet.LimitNone:
		kind, msg := pipFailure(log, r, p.cfg)
		return kind, msg, nil
	}
	return "", "", nil
}

// addedPackages are the distributions in after that are new or of another
// version than in before, by name.
func addedPackages(before, after map[string]InstalledPackage) []InstalledPackage {
	var added []InstalledPackage
	for name, p := range after {
		if old, ok := before[name]; !ok || old.Version != p.Version {
			added = append(added, p)
		}
	}
	sort.Slice(added, func(i, j int) bool { return added[i].Name < added[j].Name })
	return added
}

// installed fills res with a successful install of r into t.
func installed(res *InstallResult, t Target, r policy.Requirement, after map[string]InstalledPackage, added []InstalledPackage) {
	res.Installed = added
	if res.Installed == nil {
		res.Installed = []InstalledPackage{}
	}
	if p, ok := after[r.Normalized]; ok {
		v := p.Version
		res.InstalledVersion = &v
	}
	// The session's import policy now allows what was installed.
	if t.Allow != nil {
		for _, p := range added {
			t.Allow(p.Modules)
		}
	}
	res.Success = true
	version := "?"
	if res.InstalledVersion != nil {
		version = *res.InstalledVersion
	}
	where := "session " + t.ID
	if t.ID == layerID {
		where = "the operator's package layer (every sandbox started from now on)"
	}
	res.Message = fmt.Sprintf("installed %s %s into %s", r.Name, version, where)
	if len(added) > 1 {
		res.Message += fmt.Sprintf(" (with %d dependencies)", len(added)-1)
	}
}
