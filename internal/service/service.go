package service

import (
	"cmp"
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/check"
	"github.com/codecage/codecage/internal/service/codemode"
	"github.com/codecage/codecage/internal/service/commands"
	"github.com/codecage/codecage/internal/service/envs"
	"github.com/codecage/codecage/internal/service/files"
	"github.com/codecage/codecage/internal/service/gateway"
	"github.com/codecage/codecage/internal/service/packages"
	"github.com/codecage/codecage/internal/service/persist"
	"github.com/codecage/codecage/internal/service/report"
	"github.com/codecage/codecage/internal/service/secrets"
	"github.com/codecage/codecage/internal/service/sizing"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/upstream"
)

// MaxResultBytes bounds the encoded value of a final expression.
const MaxResultBytes = 64 << 10

// Service runs executions. It is safe for concurrent use.
//
// The service holds what a request means: admission, limits, import
// policy, results, events, sessions, files, commands, packages, code mode.
// Every sandbox it needs comes from its fleet, which owns them all.
type Service struct {
	cfg    config.Config
	egress egress.Policy
	logp   atomic.Pointer[slog.Logger]

	fleet     *fleet.Fleet
	sessions  *session.Table // nil until New has made the fleet
	stop      chan struct{}  // closed by Close
	closeOnce sync.Once

	gate         *access.Gate // rate and concurrency limits of callers
	obsMu        sync.RWMutex
	observer     Observer
	drain        drain
	layerBinds   []fleet.Bind // the operator's package layer, when it has packages
	layerModules []string
	codeMode     *codemode.CodeMode // code mode's upstream tools (codemode.go)
	gateways     *gateway.Registry  // sandboxes' MCP gateways (gateway.go)
	importCache  importCache
	cluster      Cluster // the other replicas, or nil
	// files is the file API (internal/service/files): its transfers and
	// watches; made with the session table.
	files *files.Files
	// envs is the environments domain (environments.go, envwire.go): the
	// store, its use counts and builds; made at New.
	envs *envs.Envs
	// persist is the persistence domain (persist.go): pauses, snapshots,
	// forks, parked sessions and the snapshot store; made at New.
	persist *persist.Persist
	// secrets are the owners' secrets and the sessions' own (credentials.go);
	// egressRoots verify the servers of credentialed tunnels.
	secrets        *secrets.Domain
	egressRoots    *x509.CertPool
	sandboxSecrets sandboxSecrets
	// operatorCreds are SANDBOX_EGRESS_CREDENTIALS', every proxy's.
	operatorCreds *secrets.Operator
	// cmds runs commands (the commands domain), pkgs installs packages
	// (the packages domain); both set at New.
	cmds *commands.Commands
	pkgs *packages.Packages
	// procs are the sessions' processes (processes.go).
	procs *commands.Processes
}

// Options are what a service is given besides the configuration. Each is
// fixed at New: nothing is set on a service once it may take requests.
type Options struct {
	Log      *slog.Logger      // where the service logs (egress decisions, for one); nil: slog.Default()
	Observer Observer          // who receives the service's events; nil: nobody (see SetObserver)
	Cluster  Cluster           // the other replicas; nil: a single server
	Upstream *upstream.Manager // code mode's upstream MCP servers, whose credentials stay in this process; nil: none
	// Gateways are the upstream servers a sandbox's MCP gateway may start
	// for it (those with a gateway block; E2B's mcp on create).
	Gateways upstream.Config
}

// New returns a service for the operator's configuration, or an error
// wrapping [ErrUnavailable] when this host cannot build the required sandbox.
// opts may be nil.
func New(cfg config.Config, opts *Options) (*Service, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if err := fleet.ProbeHost().Usable(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	eg, err := egress.ParsePolicy(strings.Join(cfg.NetworkAllow, ","))
	if err != nil {
		return nil, fmt.Errorf("SANDBOX_NETWORK_ALLOW: %w", err)
	}
	roots, err := loadEgressRoots(cfg.EgressRoots)
	if err != nil {
		return nil, err
	}
	operatorCreds, err := secrets.LoadOperator(cfg.EgressCredentials)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, egress: eg, stop: make(chan struct{}), gate: access.NewGate(cfg.AccessLimits()),
		observer: o.Observer, cluster: o.Cluster, egressRoots: roots, secrets: secrets.New(cfg, o.Log), operatorCreds: operatorCreds}
	s.codeMode = codemode.New(o.Upstream, codemode.Limits{MaxCalls: cfg.ToolsMaxCalls, Timeout: cfg.ToolsTimeout, MaxResult: cfg.ToolsMaxResult}, s.emit)
	s.gateways = gateway.New(o.Gateways, gateway.Limits{MaxCalls: cfg.GatewayMaxCalls, Timeout: cfg.ToolsTimeout, MaxResult: int(cfg.ToolsMaxResult)}, s.emit, o.Log, s.gatewaySandbox)
	if s.gateways.Offers() {
		go s.sweepGateways(30 * time.Second)
	}
	go s.sweepSecrets(30 * time.Second)
	s.logp.Store(o.Log)
	s.drain.init()
	switch {
	case cfg.Isolation == config.IsolationGVisor:
		// Every run needs it: refuse to start rather than fail each run.
		if gv := fleet.ProbeGVisor(s.cfg.Runsc, s.cfg.GVisorPlatform); !gv.Available {
			return nil, fmt.Errorf("%w: SANDBOX_ISOLATION=gvisor, but gVisor does not work here: %s", ErrUnavailable, gv.Error)
		}
	case cfg.EnableContainerMode:
		go fleet.ProbeGVisor(s.cfg.Runsc, s.cfg.GVisorPlatform) // answered before the first use_container run or /info asks
	}
	session.Reclaim(cfg.StateDir, s.log())
	s.loadLayer()
	store, err := envstore.Open(cmp.Or(cfg.EnvironmentsDir, filepath.Join(cfg.StateDir, "environments")))
	if err != nil {
		return nil, fmt.Errorf("environments: %w", err)
	}
	s.fleet = fleet.New(sizing.Fleet(s.cfg, s.layerBinds))
	s.sessions = session.NewTable(cfg, session.Options{Log: o.Log, Fleet: s.fleet, Layer: s.layerBinds,
		NewID: s.newSessionID, Egress: s.startSessionEgress, Secrets: s.secrets.Resolver, StartError: s.fleetError, Rebooted: s.sessionRebooted})
	s.files = s.newFiles()
	s.cmds = commands.New(commands.Options{Config: cfg, Fleet: s.fleet, Sessions: s.sessions, Caps: sizing.Caps(cfg), Log: s.log,
		FleetError: s.fleetError, Layers: report.Layers, LimitMessage: limitMessage, WorkspacePath: files.WorkspacePath})
	s.procs = commands.NewProcesses()
	s.pkgs = packages.New(packages.Options{Config: cfg, Fleet: s.fleet, Caps: sizing.Caps(cfg), FleetError: s.fleetError, Proxy: s.pipProxy})
	s.envs = s.newEnvs(store)
	s.persist = s.newPersist()
	s.startSpares()
	go s.sessions.Reaper(s.stop)
	go s.persist.ParkLongPauses(s.stop)
	go s.persist.CollectSnapshots(s.stop)
	return s, nil
}

// log is the service's logger.
func (s *Service) log() *slog.Logger { return s.logp.Load() }

// Config returns the operator's configuration the service runs with.
func (s *Service) Config() config.Config { return s.cfg }

// Execute runs req in a fresh sandbox. Failures of the code (exceptions,
// limits, crashes) are reported in the Result; the error is for requests
// that cannot run at all.
func (s *Service) Execute(ctx context.Context, req Request) (*Result, error) {
	// The sink outlives the run: when the run returns, its slot and its
	// session are free whatever the client reads, and only this request
	// waits (a bounded time) for the last lines to reach the client.
	sink := report.NewSink(req.OnOutput)
	req.OnOutput = sink.OnOutput()
	res, err := s.executeRequest(ctx, req)
	if dropped := sink.Finish(report.DrainWait); res != nil {
		res.OutputDropped = report.AddDropped(res.OutputDropped, dropped)
	}
	return res, err
}

// executeRequest is Execute with its output behind a sink.
func (s *Service) executeRequest(ctx context.Context, req Request) (*Result, error) {
	fwd := req
	fwd.OnOutput = nil
	refused := report.NewRefusals()
	var profile string
	ran, err := do(ctx, s, opExecute, call[ranResult]{
		session: req.SessionID, owner: req.Owner, args: fwd, onOutput: req.OnOutput,
		forwardAction: "session:" + req.SessionID,
		profile:       strings.Join(req.Profiles, ","), code: req.Code,
		run: func(ctx context.Context) (ranResult, error) {
			res, p, err := s.execute(ctx, req, refused)
			profile = p
			return ranOf(res), err
		},
		success: func(ran ranResult, took time.Duration) Event {
			res := ran.Result
			ev := Event{Kind: EventExecute, ExecutionID: res.ExecutionID, Profile: profile, Backend: res.Backend, Code: req.Code,
				Outcome: res.Outcome(), Duration: took, SecurityEvents: report.SecurityEvents(res, refused)}
			if req.SessionID != "" {
				ev.Action = "session:" + req.SessionID
			}
			if res.Limit != nil {
				ev.Limit = *res.Limit
			}
			if res.Error != nil {
				ev.Detail = res.Error.Type + ": " + res.Error.Message
			}
			return ev
		},
	})
	if ran.Result != nil {
		ran.Result.Runs, ran.Result.Gone = ran.Runs, ran.Gone
	}
	return ran.Result, err
}

// opExecute runs code (Execute).
const opExecute = "execute"

func runOps() map[string]op {
	return map[string]op{
		opExecute: {admit: admitHeavy, kind: EventExecute, peer: peerOp[Request, ranResult]{run: runExecute, do: serveExecute}},
	}
}

func serveExecute(ctx context.Context, s *Service, call PeerCall, req Request, out outputFunc) (ranResult, error) {
	req.SessionID, req.Owner, req.OnOutput = call.SessionID, call.Owner, out
	res, err := s.Execute(ctx, req)
	return ranOf(res), err
}

// runExecute: a run may take its own timeout, or the default one.
func runExecute(s *Service, req Request) time.Duration { return max(s.cfg.Timeout, req.Timeout) }

// execute runs an admitted request; it returns the profile label of the
// run with the result.
func (s *Service) execute(ctx context.Context, req Request, refused *report.Refusals) (*Result, string, error) {
	if err := check.Code(req.Code, s.cfg.MaxCodeSize); err != nil {
		return nil, "", err
	}
	if err := s.useContext(&req); err != nil {
		return nil, "", err
	}
	if err := check.Run(req.SessionID != "", req.Context, req.NewContext, req.Cwd, req.Env); err != nil {
		return nil, "", err
	}
	if err := check.Language(req.Language, s.cfg.Kernels, req.SessionID != "", len(req.Tools) > 0); err != nil {
		return nil, "", err
	}
	if req.SessionID != "" {
		return s.executeSessionRun(ctx, req, refused)
	}
	return s.executeStateless(ctx, req, refused)
}

// executeSessionRun is execute in the request's session, whose profiles,
// imports, memory, backend and environment were chosen at its creation.
func (s *Service) executeSessionRun(ctx context.Context, req Request, refused *report.Refusals) (*Result, string, error) {
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, "", err
	}
	if req.MemoryBytes != 0 || len(req.Profiles) > 0 || len(req.AllowedImports) > 0 || (req.UseContainer && se.Backend() != config.IsolationGVisor) ||
		(req.Environment != "" && req.Environment != se.Request().Environment) {
		return nil, "", fmt.Errorf("%w: a session's profiles, imports, memory, backend (use_container) and environment are chosen when it is created", ErrInvalidRequest)
	}
	limits, err := s.limits(req, se.Imports().Whole())
	if err != nil {
		return nil, "", err
	}
	res, err := s.executeInSession(ctx, req, limits, refused)
	return res, se.Imports().Label(), err
}

// executeStateless is execute in a sandbox of its own: its backend,
// environment, import policy, tools and limits resolved from the request,
// a sandbox from the pools (or started), and the harness's answer.
func (s *Service) executeStateless(ctx context.Context, req Request, refused *report.Refusals) (*Result, string, error) {
	backend, err := s.backendFor(req.UseContainer)
	if err != nil {
		return nil, "", err
	}
	env, err := s.envs.Resolve(req.Environment)
	if err != nil {
		return nil, "", err
	}
	if env.ID != "" {
		defer s.envs.InUse(env.ID)() // no collection under the run
	}
	imports, err := s.resolveImports(req.Profiles, req.AllowedImports)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	imports = envs.WithModules(imports, env)

	tools, err := s.codeMode.Resolve(ctx, req.Tools)
	if err != nil {
		return nil, "", err
	}
	// What the run gets beyond basic: with no profile named, what the
	// code's imports show it uses of the enabled profiles.
	features := imports.FeaturesFor(req.Code)
	limits, err := s.limits(req, features)
	if err != nil {
		return nil, "", err
	}
	work := fleet.Work{Kind: fleet.Run, ID: fleet.NewID(), Interpreter: s.cfg.Interpreter, Limits: limits,
		Layer: s.layerBinds, DataScience: features.DataScience}.FromEnvironment(env)
	if features.Network {
		proxy, fwd, trust := s.startRunEgress(work.ID, work.Root, refused.Add)
		defer proxy.Close()
		work.Forward, work.Trust = fwd, trust
	}
	lease, err := s.sandboxFor(ctx, backend, features, limits, work, env)
	if err != nil {
		return nil, "", err
	}
	defer lease.Release()
	rreq := fleet.HarnessRequest{
		Code:           req.Code,
		AllowedImports: imports.Modules,
		Profile:        imports.Label(),
		ImportHints:    imports.Hints,
		MaxResultBytes: MaxResultBytes,
		CapturePlots:   imports.Modules == nil || policy.Allows(imports.Modules, "matplotlib"),
		Tools:          codemode.Specs(tools),
		Env:            req.Env,
		Display:        req.Display,
	}
	var handler fleet.ToolHandler
	id := lease.ID()
	if len(tools) > 0 {
		var done func()
		handler, done = s.codeMode.Caller(ctx, tools, &id)
		defer done()
	}
	o := lease.Run(rreq, s.magicCaller(ctx, nil, 0, handler), req.OnOutput)
	return report.Build(id, backend, o, limits, report.Layers(backend)), imports.Label(), nil
}

// limits are the jail's limits of req (sizing.Run).
func (s *Service) limits(req Request, features policy.Features) (fleet.Limits, error) {
	return sizing.Run(s.cfg, sizing.Asked{Timeout: req.Timeout, CPUTime: req.CPUTime, Memory: req.MemoryBytes, Output: req.OutputBytes}, features.DataScience)
}
