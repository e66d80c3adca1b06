package packages

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/report"
)

// RunPip runs pip in a jail on t's package directory, for requirements
// already checked (policy.Requirement's String). It returns pip's output,
// how it ended and the sandbox's execution id.
func (p *Packages) RunPip(ctx context.Context, t Target, reqs []string) (string, fleet.Exit, string, error) {
	w := &report.Output{}
	argv := []string{"-I", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
		"--no-cache-dir", "--only-binary=:all:", "--upgrade", "--progress-bar", "off", "--target", fleet.WorkspaceDir}
	interpreter, timeout, install := p.cfg.Interpreter, p.cfg.PipTimeout, p.cfg.PipMaxInstall
	if t.Interpreter != "" {
		interpreter = t.Interpreter
	}
	if t.Timeout > 0 {
		timeout = t.Timeout
	}
	if t.MaxInstall > 0 {
		install = t.MaxInstall
	}
	var sink io.Writer = w
	if t.Log != nil {
		sink = io.MultiWriter(w, t.Log)
	}
	work := fleet.Work{Kind: fleet.Pip, ID: fleet.NewID(), Interpreter: interpreter, Workspace: t.Site, HostUID: t.UID,
		Limits: p.o.Caps.Pip(timeout, p.cfg.PipMaxDownload, install),
		Stdout: sink, Stderr: sink}
	if p.cfg.PipFindLinks != "" {
		argv = append(argv, "--no-index", "--find-links", wheelhouseInside)
		work.Binds = []fleet.Bind{{Host: p.cfg.PipFindLinks, Path: wheelhouseInside}}
	} else {
		pol, err := indexPolicy(p.cfg.PipIndexURL)
		if err != nil {
			return "", fleet.Exit{}, "", fmt.Errorf("%w: SANDBOX_PIP_INDEX_URL: %v", errdefs.ErrUnavailable, err)
		}
		proxy, forward := p.o.Proxy(pol, work.ID)
		defer proxy.Close()
		work.Forward = forward
		argv = append(argv, "--index-url", p.cfg.PipIndexURL)
	}
	work.Argv = append(append(argv, "--"), reqs...)
	spec := work.Spec()
	spec.Root = t.Root
	lease, err := p.o.Fleet.Start(ctx, fleet.Native, spec)
	if err != nil {
		return "", fleet.Exit{}, "", p.o.FleetError(ctx, err)
	}
	exit := lease.WaitProgram()
	return w.String(), exit, spec.ID, nil
}

// indexPolicy lets pip reach the index's host (and PyPI's file host when
// the index is PyPI) and nothing else.
func indexPolicy(index string) (egress.Policy, error) {
	u, err := url.Parse(index)
	if err != nil || u.Host == "" {
		return egress.Policy{}, fmt.Errorf("%q is not a URL", index)
	}
	allow := []string{u.Host}
	if u.Hostname() == "pypi.org" {
		allow = append(allow, "files.pythonhosted.org")
	}
	return egress.ParsePolicy(strings.Join(allow, ","))
}

// blockedMessage is a refusal of the package policy, without its sentinel.
func blockedMessage(err error) string {
	return strings.TrimPrefix(err.Error(), policy.ErrBadPackage.Error()+": ")
}

// pipFailure names a failed install from pip's output.
func pipFailure(log string, r policy.Requirement, cfg config.Config) (string, string) {
	switch {
	case strings.Contains(log, "No space left on device") || strings.Contains(log, "Errno 28") || strings.Contains(log, "File too large"):
		return InstallTooLarge, fmt.Sprintf("%s is too large: downloads are limited to %d bytes (SANDBOX_PIP_MAX_DOWNLOAD) and a session's packages to %d (SANDBOX_PIP_MAX_INSTALL)", r.Name, cfg.PipMaxDownload, cfg.PipMaxInstall)
	case strings.Contains(log, "ResolutionImpossible") || strings.Contains(log, "conflicting dependencies"):
		return InstallConflict, fmt.Sprintf("the requirements of %s conflict; see the log", r.String())
	case strings.Contains(log, "No matching distribution found"):
		if r.Specifier != "" {
			return InstallNotFound, fmt.Sprintf("no wheel of %s matches %s (or one of its dependencies has none)", r.Name, r.Specifier)
		}
		return InstallNotFound, fmt.Sprintf("no wheel found for %s or one of its dependencies", r.Name)
	}
	return InstallFailed, "pip failed; see the log"
}

// noPipModule is Python's answer to -m pip without pip.
var noPipModule = regexp.MustCompile(`(?m)No module named pip\s*$`)

var successLine = regexp.MustCompile(`(?m)^Successfully installed (.+)$`)

// pipInstalled reads pip's "Successfully installed a-1.0 b-2.0" line:
// normalized name to version.
func pipInstalled(log string) map[string]string {
	out := map[string]string{}
	m := successLine.FindStringSubmatch(log)
	if m == nil {
		return out
	}
	for _, nv := range strings.Fields(m[1]) {
		if i := strings.LastIndexByte(nv, '-'); i > 0 {
			out[policy.NormalizePackageName(nv[:i])] = nv[i+1:]
		}
	}
	return out
}
