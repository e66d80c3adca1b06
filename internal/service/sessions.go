package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/check"
	"github.com/codecage/codecage/internal/service/envs"
	"github.com/codecage/codecage/internal/session"
)

// The service's session operations: what a session request means (its
// shape resolved and checked, its events), around the session table of
// internal/session, which owns the sessions themselves.

// SessionRequest opens a session.
type SessionRequest = session.Request

// SessionInfo describes a session. A type of its own, not an alias, so
// that the OpenAPI schema keeps its name.
type SessionInfo session.Info

// session returns the caller's session id, or ErrSessionNotFound.
func (s *Service) session(id, owner string) (*session.Session, error) {
	return s.sessions.Get(id, owner)
}

// localSessions lists the owner's sessions on this replica.
func (s *Service) localSessions(owner string) []SessionInfo {
	list := s.sessions.List(owner)
	out := make([]SessionInfo, len(list))
	for i, info := range list {
		out[i] = SessionInfo(info)
	}
	return out
}

// SessionCount is the number of sessions open.
func (s *Service) SessionCount() int { return s.sessions.Count() }

// SessionIdleCPU is the CPU time sessions have spent while no request ran
// in them, in all, since the service started (reported when a session's
// next request starts, when it restarts, and when it closes).
func (s *Service) SessionIdleCPU() time.Duration { return s.sessions.IdleCPU() }

// GetSession describes one of the owner's sessions.
func (s *Service) GetSession(ctx context.Context, id, owner string) (*SessionInfo, error) {
	return do(ctx, s, opGet, call[*SessionInfo]{
		session: id, owner: owner,
		run: func(ctx context.Context) (*SessionInfo, error) {
			se, err := s.session(id, owner)
			if errors.Is(err, ErrSessionNotFound) {
				if info, ok, perr := s.parked(ctx, owner, id); ok || perr != nil {
					return info, perr
				}
			}
			if err != nil {
				return nil, err
			}
			info := SessionInfo(s.sessions.Describe(se))
			return &info, nil
		},
	})
}

// CreateSession opens a session: a sandbox whose interpreter keeps its
// variables, imports and functions between requests.
func (s *Service) CreateSession(ctx context.Context, req SessionRequest) (*SessionInfo, error) {
	return do(ctx, s, opCreate, call[*SessionInfo]{
		profile: strings.Join(req.Profiles, ","),
		run: func(ctx context.Context) (*SessionInfo, error) {
			if req.FromSnapshot != "" {
				return s.openFromSnapshot(ctx, req)
			}
			return s.createSession(ctx, req)
		},
		success: func(info *SessionInfo, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "create", Profile: strings.Join(info.Profiles, ","), Backend: info.Backend, Outcome: "success",
				Duration: took, Detail: info.ID}
		},
	})
}

func (s *Service) createSession(ctx context.Context, req SessionRequest) (*SessionInfo, error) {
	backend, err := s.backendFor(req.UseContainer)
	if err != nil {
		return nil, err
	}
	env, err := s.envs.Resolve(req.Environment)
	if err != nil {
		return nil, err
	}
	if env.ID != "" {
		// Until the session is in the table, where the collector finds it.
		defer s.envs.InUse(env.ID)()
	}
	req = envs.WithStartCommand(envs.SessionIn(req, env), env)
	imports, err := s.resolveImports(req.Profiles, req.AllowedImports)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	imports = envs.WithModules(imports, env)

	limits, err := s.limits(Request{MemoryBytes: req.MemoryBytes}, imports.Whole())
	if err != nil {
		return nil, err
	}
	if err := check.Session(req, s.cfg.SessionMaxLifetime); err != nil {
		return nil, err
	}
	if err := check.Machine(req.Machine, backend, s.cfg.MachineSessions); err != nil {
		return nil, err
	}
	if req.Network, err = check.Network(req.Network, imports.Uses(policy.Network)); err != nil {
		return nil, err
	}
	if err := checkBindings(req.Credentials, imports.Uses(policy.Network)); err != nil {
		return nil, err
	}
	if err := s.ownerHolds(ctx, req.Owner, req.Credentials, false); err != nil {
		return nil, err
	}
	info, err := s.sessions.Create(ctx, req, session.Shape{Imports: imports, Limits: limits, Backend: backend, Env: env})
	if err != nil {
		return nil, err
	}
	// The environment's files at the home, then its start and ready
	// commands (envwire.go): the session is handed out ready, or closed.
	if err := s.seedSession(ctx, info.ID, req.Owner, env); err != nil {
		s.dropSession(info.ID, req.Owner)
		return nil, err
	}
	if err := s.startEnvironmentOrDrop(ctx, info.ID, req.Owner, env); err != nil {
		return nil, err
	}
	out := SessionInfo(info)
	return &out, nil
}

// SetSessionLifetime ends a session d from now instead of when it was to
// end (used or not), within SANDBOX_SESSION_MAX_LIFETIME of its start.
// It returns when the session now ends.
func (s *Service) SetSessionLifetime(ctx context.Context, id, owner string, d time.Duration) (time.Time, error) {
	return do(ctx, s, opLifetime, call[time.Time]{
		session: id, owner: owner, args: lifetimeArgs{Lifetime: d},
		run: func(context.Context) (time.Time, error) { return s.setSessionLifetime(id, owner, d) },
		success: func(end time.Time, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "lifetime", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: ends at %s", id, end.UTC().Format(time.RFC3339))}
		},
	})
}

func (s *Service) setSessionLifetime(id, owner string, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: lifetime must be positive", ErrInvalidRequest)
	}
	se, err := s.session(id, owner)
	if err != nil {
		return time.Time{}, err
	}
	if err := check.Lifetime(d, se.Created(), s.cfg.SessionMaxLifetime); err != nil {
		return time.Time{}, err
	}
	s.sessions.ExpireAfter(se, d)
	return se.Deadline(), nil
}

// RestartSession starts a fresh interpreter for a session, keeping its
// workspace files.
func (s *Service) RestartSession(ctx context.Context, id, owner string) (*SessionInfo, error) {
	return do(ctx, s, opRestart, call[*SessionInfo]{
		session: id, owner: owner,
		run: func(ctx context.Context) (*SessionInfo, error) { return s.restartSession(ctx, id, owner) },
		success: func(info *SessionInfo, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "restart", Profile: strings.Join(info.Profiles, ","), Outcome: "success",
				Duration: took, Detail: id}
		},
	})
}

func (s *Service) restartSession(ctx context.Context, id, owner string) (*SessionInfo, error) {
	se, err := s.session(id, owner)
	if err != nil {
		return nil, err
	}
	info, err := s.sessions.Restart(ctx, se)
	if err != nil {
		return nil, err
	}
	out := SessionInfo(info)
	return &out, nil
}

// CloseSession ends a session, its sandbox and its workspace.
func (s *Service) CloseSession(ctx context.Context, id, owner string) error {
	_, err := do(ctx, s, opClose, call[struct{}]{
		session: id, owner: owner,
		run: func(ctx context.Context) (struct{}, error) {
			se, err := s.session(id, owner)
			if errors.Is(err, ErrSessionNotFound) {
				err = s.persist.CloseParked(ctx, owner, id)
			} else if err == nil {
				s.sessions.Drop(se)
			}
			if err == nil {
				s.gateways.Close(id) // else the sweep ends it (an expiry)
				s.dropSandboxSecrets(ctx, id)
			}
			return struct{}{}, err
		},
		success: func(_ struct{}, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "close", Outcome: "success", Duration: took, Detail: id}
		},
	})
	return err
}

// The session operations. The snapshot store is shared by the replicas,
// so a new session is made where it is asked.
const (
	opCreate   = "create"
	opGet      = "get"
	opList     = "list" // this replica's sessions (ListSessions asks each)
	opRestart  = "restart"
	opClose    = "close"
	opLifetime = "lifetime"
	opMetrics  = "metrics"
	// A connection to a session's port is made where the session runs.
	opPort = "port"
)

func sessionOps() map[string]op {
	return map[string]op{
		opCreate:   {admit: admitHeavy, kind: EventSession, action: "create"},
		opRestart:  {admit: admitHeavy, kind: EventSession, action: "restart", peer: peerOp[noArgs, *SessionInfo]{run: runRestart, do: serveRestart}},
		opClose:    {admit: admitLight, kind: EventSession, action: "close", parked: parkLeave, peer: peerOp[noArgs, struct{}]{do: serveClose}},
		opGet:      {admit: admitNone, kind: EventSession, action: "get", quiet: true, parked: parkLeave, peer: peerOp[noArgs, *SessionInfo]{do: serveGet}},
		opList:     {admit: admitNone, kind: EventSession, action: "list", quiet: true, peer: peerOp[noArgs, []SessionInfo]{do: serveList}},
		opLifetime: {admit: admitNone, kind: EventSession, action: "lifetime", peer: peerOp[lifetimeArgs, time.Time]{do: serveLifetime}},
		opNetwork:  {admit: admitNone, kind: EventSession, action: "network", peer: peerOp[NetworkRules, NetworkRules]{do: serveNetwork}},
		// A paused session's ports wait for a resume (the caller's).
		opPort:    {admit: admitLight, kind: EventSession, action: "port", parked: parkLeave},
		opMetrics: {admit: admitNone, kind: EventSession, action: "metrics", quiet: true, parked: parkLeave, peer: peerOp[noArgs, *SessionMetrics]{do: serveMetrics}},
	}
}

func serveGet(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) (*SessionInfo, error) {
	return s.GetSession(ctx, call.SessionID, call.Owner)
}

func serveList(_ context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) ([]SessionInfo, error) {
	return s.localSessions(call.Owner), nil
}

func serveRestart(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) (*SessionInfo, error) {
	return s.RestartSession(ctx, call.SessionID, call.Owner)
}

// runRestart: a gVisor sandbox may take seconds to start.
func runRestart(*Service, noArgs) time.Duration { return time.Minute }

func serveClose(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) (struct{}, error) {
	return struct{}{}, s.CloseSession(ctx, call.SessionID, call.Owner)
}

// lifetimeArgs: the session's new lifetime, from now.
type lifetimeArgs struct {
	Lifetime time.Duration `json:"lifetime,omitempty"`
}

func serveLifetime(ctx context.Context, s *Service, call PeerCall, a lifetimeArgs, _ outputFunc) (time.Time, error) {
	return s.SetSessionLifetime(ctx, call.SessionID, call.Owner, a.Lifetime)
}
