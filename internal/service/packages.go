package service

import (
	"context"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/packages"
)

// The packages domain (internal/service/packages) installs packages; the
// root admits, forwards and audits each request, resolves its session and
// holds its run lock. These names keep the surfaces' spelling
// (service.InstallRequest).

// EventInstall is the event kind of pip_install.
const EventInstall = packages.EventInstall

type (
	// InstallRequest asks to install a package into a session.
	InstallRequest = packages.InstallRequest
	// InstallResult is pip_install's result.
	InstallResult = packages.InstallResult
	// InstalledPackage is one distribution in a package directory.
	InstalledPackage = packages.InstalledPackage
)

// Why an install failed, in InstallResult.Error.
const (
	InstallBlocked  = packages.InstallBlocked
	InstallNotFound = packages.InstallNotFound
	InstallNoWheel  = packages.InstallNoWheel
	InstallTooLarge = packages.InstallTooLarge
	InstallConflict = packages.InstallConflict
	InstallTimeout  = packages.InstallTimeout
	InstallFailed   = packages.InstallFailed
)

// PipInstall installs a package (wheels only) into a session's own package
// directory with pip running in a jail whose only way out is the egress
// proxy, allowed to reach the configured index (or no network at all with
// a local wheelhouse). The session's later runs can import it.
func (s *Service) PipInstall(ctx context.Context, req InstallRequest) (*InstallResult, error) {
	fwd := req
	start := time.Now()
	return do(ctx, s, opInstall, call[*InstallResult]{
		session: req.SessionID, owner: req.Owner, args: fwd,
		forwardAction: "session:" + req.SessionID,
		code:          req.Package,
		run:           func(ctx context.Context) (*InstallResult, error) { return s.pipInstall(ctx, req, start) },
		success:       func(res *InstallResult, took time.Duration) Event { return installEvent(req, res, took) },
	})
}

// opInstall installs a package into a session (PipInstall).
const opInstall = "install"

func installOps() map[string]op {
	return map[string]op{
		opInstall: {admit: admitHeavy, kind: EventInstall, peer: peerOp[InstallRequest, *InstallResult]{run: runInstall, do: serveInstall}},
	}
}

func serveInstall(ctx context.Context, s *Service, call PeerCall, req InstallRequest, _ outputFunc) (*InstallResult, error) {
	req.SessionID, req.Owner = call.SessionID, call.Owner
	return s.PipInstall(ctx, req)
}

// runInstall: pip has a bound of its own.
func runInstall(s *Service, _ InstallRequest) time.Duration { return s.cfg.PipTimeout }

func (s *Service) pipInstall(ctx context.Context, req InstallRequest, start time.Time) (*InstallResult, error) {
	r, err := packages.Parse(req)
	if err != nil {
		return nil, err
	}
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, err
	}
	// One request at a time per session, as for its interpreter.
	se.Lock()
	defer se.Unlock()
	return s.pkgs.Install(ctx, se, r, start)
}

// installEvent is the event of an install that ran.
func installEvent(req InstallRequest, res *InstallResult, took time.Duration) Event {
	ev := Event{Kind: EventInstall, ExecutionID: res.ExecutionID, Code: strings.TrimSpace(req.Package + " " + req.Version),
		Outcome: "success", Duration: took, Detail: res.Message, Action: "session:" + req.SessionID}
	if res.ExecutionID != "" {
		ev.Backend = config.IsolationNative // pip runs in the native jail
	}
	if res.Error != nil {
		ev.Outcome = *res.Error
		if *res.Error == InstallBlocked {
			ev.SecurityEvents = []string{"package_blocked:" + req.Package}
		}
	}
	for _, w := range res.Warnings {
		if strings.HasPrefix(w, "typosquat") {
			ev.SecurityEvents = append(ev.SecurityEvents, "package_typosquat:"+req.Package)
		}
	}
	return ev
}

// pipProxy runs pip's egress proxy under pol: connections to the
// sandbox's proxy port arrive through the jail's Forward.
func (s *Service) pipProxy(pol egress.Policy, label string) (*egress.Proxy, *fleet.Forward) {
	proxy := egress.New(pol, egress.Options{Label: label, Logger: s.log()})
	return proxy, &fleet.Forward{Port: proxyPort, Handle: proxy.ServeHandedOff(proxyPort)}
}
