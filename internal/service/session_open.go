package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// Opening a session: its shape checked, its workspace made, its
// interpreter started.

// CreateSession opens a session: a sandbox whose interpreter keeps its
// variables, imports and functions between requests.
func (s *Service) CreateSession(ctx context.Context, req SessionRequest) (*SessionInfo, error) {
	return do(ctx, s, opCreate, call[*SessionInfo]{
		profile: strings.Join(req.Profiles, ","),
		run:     func(ctx context.Context) (*SessionInfo, error) { return s.createSession(ctx, req) },
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
	imports, err := s.resolveImports(req.Profiles, req.AllowedImports)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}

	limits, err := s.limits(Request{MemoryBytes: req.MemoryBytes}, imports.Whole())
	if err != nil {
		return nil, err
	}
	if err := s.checkSessionShape(req); err != nil {
		return nil, err
	}
	var spare *session
	// Spares are started at /workspace with the default environment.
	if req.Home == "" && len(req.Env) == 0 && s.spares.fits(imports, limits) {
		spare = s.takeSpare(backend)
	}
	s.sessions.mu.Lock()
	if len(s.sessions.byID) >= s.cfg.MaxSessions {
		s.sessions.mu.Unlock()
		if spare != nil {
			s.returnSpare(spare)
		}
		return nil, fmt.Errorf("%w: %d sessions are open (SANDBOX_MAX_SESSIONS); close one first", ErrTooManySessions, s.cfg.MaxSessions)
	}
	if spare != nil {
		// A fresh sandbox no one has used: it becomes the caller's, with
		// its lifetime counted from now.
		spare.mu.Lock()
		// Spares start before the service knows its replica id: the
		// session gets its id as it is handed out.
		spare.id = s.newSessionID()
		spare.owner, spare.req = req.Owner, req
		spare.created, spare.used = time.Now(), time.Now()
		spare.sandbox().Arm(context.Background(), s.cfg.SessionMaxLifetime, s.cfg.SessionMaxLifetime)
		s.expireAfter(spare, req.Lifetime)
		s.sessions.byID[spare.id] = spare
		info := spare.info(s.cfg)
		spare.mu.Unlock()
		s.sessions.mu.Unlock()
		return &info, nil
	}
	id := s.newSessionID()
	now := time.Now()
	se := &session{id: id, owner: req.Owner, req: req, imports: imports, limits: limits, created: now, used: now, backend: backend}
	// Held while it starts, so the reaper does not take a session that
	// boots slower than its idle TTL (gVisor) for an idle one.
	se.mu.Lock()
	s.sessions.byID[id] = se // holds the slot while it starts
	s.sessions.mu.Unlock()

	err = s.startSession(ctx, se, s.fleet.Start)
	se.used = time.Now()
	if err == nil {
		s.expireAfter(se, req.Lifetime)
	}
	se.mu.Unlock()
	if err != nil {
		s.dropSession(se)
		return nil, err
	}
	info := se.info(s.cfg)
	return &info, nil
}

// checkSessionShape refuses a session's home, environment, lifetime or
// labels that are not what they should be.
func (s *Service) checkSessionShape(req SessionRequest) error {
	if err := fleet.CheckHome(req.Home); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, strings.TrimPrefix(err.Error(), "jail: "))
	}
	if err := checkEnv(req.Env); err != nil {
		return err
	}
	if err := s.checkLifetime(req.Lifetime, time.Now()); err != nil {
		return err
	}
	if len(req.Template) > 256 || !utf8.ValidString(req.Template) || strings.ContainsRune(req.Template, 0) {
		return fmt.Errorf("%w: template: at most 256 bytes of UTF-8 text without NUL", ErrInvalidRequest)
	}
	if len(req.Labels) > 64 {
		return fmt.Errorf("%w: at most 64 labels", ErrInvalidRequest)
	}
	for k, v := range req.Labels {
		if len(k) > 256 || len(v) > 4096 || !utf8.ValidString(k+v) || strings.ContainsRune(k+v, 0) {
			return fmt.Errorf("%w: label %s: names and values must be UTF-8 text without NUL, at most 256 and 4096 bytes", ErrInvalidRequest, Quote(k))
		}
	}
	return nil
}

// startSession (re)starts the session's sandbox on its workspace; start
// gets it from the fleet (a new slot, a spare's, or the session's own).
func (s *Service) startSession(ctx context.Context, se *session, start fleet.Launch) error {
	if se.dir == "" {
		claim, err := claimWorkspaces(s.cfg.StateDir, se.id)
		if err != nil {
			return fmt.Errorf("%w: workspace: %v", ErrUnavailable, err)
		}
		se.claim = claim // dropSession releases it
		dir, quota, err := newWorkspace(s.cfg.StateDir, se.id, s.cfg.WorkspaceMax)
		if err != nil {
			return fmt.Errorf("%w: workspace: %v", ErrUnavailable, err)
		}
		site, _, err := newWorkspace(s.cfg.StateDir, se.id+".site", s.cfg.PipMaxInstall)
		if err != nil {
			removeWorkspace(dir)
			return fmt.Errorf("%w: package directory: %v", ErrUnavailable, err)
		}
		uid := 0
		if os.Geteuid() == 0 {
			// One identity for the session's interpreters and commands:
			// each can change the files the others wrote.
			if uid, err = fleet.ReserveUID(); err != nil {
				removeWorkspace(dir)
				removeWorkspace(site)
				return fmt.Errorf("%w: %v", ErrUnavailable, err)
			}
		}
		se.lifeMu.Lock() // commands read them without mu
		se.dir, se.site, se.quota, se.uid = dir, site, quota, uid
		se.lifeMu.Unlock()
	}
	work := fleet.Work{Kind: fleet.Session, ID: fleet.NewID(), Interpreter: s.cfg.Interpreter,
		Workspace: se.dir, Site: se.site, Layer: s.layerBinds, HostUID: se.uid, Home: se.req.Home, Vars: se.req.Env,
		Limits: se.limits, Lifetime: s.cfg.SessionMaxLifetime, DataScience: se.imports.Uses(policy.DataScience)}
	se.closeProxy()
	if se.imports.Uses(policy.Network) {
		proxy, fwd := s.startEgress(se.id, func(host string) {
			if r := se.refused.Load(); r != nil {
				r.add(host)
			}
		})
		se.proxy, work.Forward = proxy, fwd
	}
	spec := work.Spec()
	if se.uid != 0 {
		// gVisor's harness starts in the workspace: it must be the
		// session's before the sandbox starts.
		if err := os.Chown(se.dir, se.uid, se.uid); err != nil {
			return fmt.Errorf("%w: workspace owner: %v", ErrUnavailable, err)
		}
	}
	// The sandbox outlives the request: its end must not end it. (The
	// wait for a slot is still bounded by the queue timeout.)
	lease, err := start(context.WithoutCancel(ctx), se.backend, spec)
	if err != nil {
		se.closeProxy()
		return s.fleetError(ctx, err)
	}
	se.lease.Store(lease)
	// The workspace belongs to the sandbox's host uid, so the code can write
	// there; the service reaches it as root through wsfs.
	uid := lease.HostUID()
	_ = os.Chown(se.site, uid, uid) // pip_install writes there as the session
	if err := os.Chown(se.dir, uid, uid); err != nil && !os.IsPermission(err) {
		lease.Kill(fleet.LimitNone)
		lease.Wait()
		return fmt.Errorf("%w: workspace owner: %v", ErrUnavailable, err)
	}
	se.ended = ""
	return nil
}

// newWorkspace makes a session's workspace directory. As root it is a tmpfs
// of its own, so the kernel enforces the size quota for the code's writes
// as well as the file API's; it reports whether it is.
func newWorkspace(stateDir, id string, size int64) (string, bool, error) {
	dir := filepath.Join(stateDir, "sessions", id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return "", false, err
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", false, err
	}
	mounted, err := mountWorkspace(dir, size)
	if err != nil {
		os.Remove(dir)
		return "", false, err
	}
	return dir, mounted, nil
}
