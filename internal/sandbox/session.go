package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// Session errors.
var (
	// ErrSessionNotFound: no such session, or not the caller's.
	ErrSessionNotFound = errors.New("session not found")
	// ErrSessionEnded: the session's interpreter was killed (timeout, memory,
	// output limit); restart it or create a new one.
	ErrSessionEnded = errors.New("session ended")
	// ErrTooManySessions: SANDBOX_MAX_SESSIONS are open.
	ErrTooManySessions = errors.New("too many sessions")
)

// SessionRequest opens a session.
type SessionRequest struct {
	// Owner scopes the session (an API key's name); others cannot see it.
	Owner          string
	Profiles       []string
	AllowedImports []string
	MemoryBytes    int64
	// UseContainer runs the session under gVisor (where container mode is on).
	UseContainer bool
	// Home is where the workspace appears in the sandbox, the working
	// directory and $HOME of its code and commands: /workspace when empty,
	// or /home/<name> for code written for a VM.
	Home string `json:",omitempty"`
	// Env are environment variables of every run and command of the
	// session (not loader or interpreter ones).
	Env map[string]string `json:",omitempty"`
	// Lifetime, when set, ends the session that long after it starts,
	// used or not (instead of after SANDBOX_SESSION_IDLE_TTL of idleness);
	// at most SANDBOX_SESSION_MAX_LIFETIME. SetSessionLifetime moves it.
	Lifetime time.Duration `json:",omitempty"`
	// Labels are the caller's own names for the session, given back with
	// its description.
	Labels map[string]string `json:",omitempty"`
	// Template is the name the caller gave the session's shape (an E2B
	// template), given back with its description.
	Template string `json:",omitempty"`
}

// SessionInfo describes a session.
type SessionInfo struct {
	ID        string    `json:"session_id"`
	Profiles  []string  `json:"profiles"`
	Backend   string    `json:"backend"`
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used"`
	ExpiresAt time.Time `json:"expires_at"`
	Runs      int       `json:"runs"`
	// Ended is empty while the session lives, else why it ended.
	Ended string `json:"ended,omitempty"`
	// Home is where the workspace is in the sandbox.
	Home     string            `json:"home"`
	Labels   map[string]string `json:"labels,omitempty"`
	Template string            `json:"template,omitempty"`
}

// session is one interpreter kept alive in its own sandbox, like a
// notebook kernel, with a workspace that outlives a restart.
//
// Lock order (the session table's and a session's locks):
//
//	sessions.dropping (read, around a whole drop; Close's write waits for the drops)
//	  sessions.mu
//	    session.mu (TryLock only: reaper, describe; a blocking Lock only on a
//	                session no one else can hold yet: a fresh spare, a new session)
//	      session.lifeMu
//
// session.mu is held for a whole run, up to its timeout: a blocking
// Lock of a published session under sessions.mu would freeze every
// session for that long. dropSession takes them one after the other, not
// nested: sessions.mu, then lifeMu, then waits for cmdsDone, then mu.
// The atomics (deadline, last, touched, lease, refused) exist so that
// readers need not take mu.
type session struct {
	mu sync.Mutex // one request at a time; protects the fields below unless they say otherwise
	// id, owner and req are set before the session is in the table (a
	// spare's under mu and sessions.mu) and not changed after.
	id      string
	owner   string
	req     SessionRequest
	imports policy.ImportPolicy
	limits  fleet.Limits
	// dir, site, quota and uid are written once, under mu and lifeMu
	// (startSession), and read under either: commands read them under
	// lifeMu while code runs under mu.
	dir string // host directory of the workspace
	// quota: dir is a tmpfs of its own, whose size is the workspace's
	// limit (the file API asks the kernel how full it is).
	quota bool
	site  string // host directory of its installed packages
	// claim is the lock that marks dir and site as this process's
	// (wsowner_linux.go), so a restart can reclaim a dead one's.
	claim   *os.File
	uid     int    // host uid of its sandboxes (0: each its own, rootless)
	backend string // "native" or "gvisor"
	created time.Time
	used    time.Time
	runs    int
	ended   string
	// deadline, when set, ends the session whatever its use (Lifetime);
	// expiry is the timer that does it.
	deadline atomic.Int64 // unix nanoseconds
	// last is the latest description (info), for describe.
	last   atomic.Pointer[SessionInfo]
	expiry *time.Timer
	// lifeMu protects expiry, dropped and commands: what callers reach
	// while code runs under mu. Taken after mu, never before it.
	lifeMu  sync.Mutex
	dropped bool
	// commands are the session's commands running now (they run beside
	// its interpreter, as processes of a VM do), canceled when it closes;
	// cmdsDone is when the last one ended. touched is the last time one
	// ended (unix nanoseconds): activity, for the idle TTL.
	commands map[*context.CancelFunc]struct{}
	cmdsDone sync.WaitGroup
	touched  atomic.Int64

	// lease is the session's sandbox and its slot of the budget, held
	// for the session's life (a restart replaces the sandbox, not the
	// slot); nil until it first starts.
	lease atomic.Pointer[fleet.Lease]
	// proxy is the egress proxy of a session with the network profile,
	// for the life of its sandbox; refused collects the hosts it refuses
	// during the request in progress.
	proxy   *egress.Proxy
	refused atomic.Pointer[refusals]
	// cpu is the sandbox's CPU bandwidth: full during requests, the idle
	// allowance between them.
	cpu sessionCPU
}

// sessions is the service's table of open sessions (lock order: at
// session).
type sessions struct {
	mu   sync.Mutex // protects byID; never held while waiting for a run
	byID map[string]*session
	// dropping is held (read) by each drop in progress, which may have
	// left the table already (an expiry): Close takes it to wait for them.
	dropping sync.RWMutex
}

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

// checkLifetime refuses a lifetime that would take a session created at
// created past SANDBOX_SESSION_MAX_LIFETIME.
func (s *Service) checkLifetime(d time.Duration, created time.Time) error {
	switch {
	case d < 0:
		return fmt.Errorf("%w: lifetime %s is negative", ErrInvalidRequest, d)
	case d > 0 && time.Now().Add(d).After(created.Add(s.cfg.SessionMaxLifetime).Add(time.Second)):
		return fmt.Errorf("%w: a session lives at most %s from its start (SANDBOX_SESSION_MAX_LIFETIME); %s from now is past that",
			ErrInvalidRequest, s.cfg.SessionMaxLifetime, d.Round(time.Second))
	}
	return nil
}

// expireAfter ends se d from now, used or not (nothing when d is 0: the
// idle TTL applies). Not under se.mu: that is held while code runs, and a
// caller may move the end of a session whose code is running.
func (s *Service) expireAfter(se *session, d time.Duration) {
	if d <= 0 {
		return
	}
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	se.deadline.Store(time.Now().Add(d).UnixNano())
	if se.expiry != nil {
		se.expiry.Reset(d)
		return
	}
	se.expiry = time.AfterFunc(d, func() {
		if time.Now().UnixNano() < se.deadline.Load() {
			return // moved meanwhile; the reset timer fires again
		}
		s.log().Info("session reached its lifetime", "session", se.id, "owner", se.owner)
		s.dropSession(se)
	})
}

// SetSessionLifetime ends a session d from now instead of when it was to
// end (used or not), within SANDBOX_SESSION_MAX_LIFETIME of its start.
// It returns when the session now ends.
func (s *Service) SetSessionLifetime(ctx context.Context, id, owner string, d time.Duration) (time.Time, error) {
	return do(ctx, s, OpLifetime, call[time.Time]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Lifetime: d},
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
	// se.created is set before a session is shared and never changes.
	if err := s.checkLifetime(d, se.created); err != nil {
		return time.Time{}, err
	}
	s.expireAfter(se, d)
	return time.Unix(0, se.deadline.Load()), nil
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

// session returns the caller's session id, or ErrSessionNotFound.
func (s *Service) session(id, owner string) (*session, error) {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	se, ok := s.sessions.byID[id]
	if !ok || se.owner != owner {
		return nil, fmt.Errorf("%w: %s", ErrSessionNotFound, Quote(id))
	}
	return se, nil
}

// closeProxy ends the session's egress proxy, if it has one.
func (se *session) closeProxy() {
	if se.proxy != nil {
		se.proxy.Close()
		se.proxy = nil
	}
}

// executeInSession runs req in its session's interpreter; refused collects
// the hosts its egress proxy refuses meanwhile.
func (s *Service) executeInSession(ctx context.Context, req Request, limits fleet.Limits, refused *refusals) (*Result, error) {
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, err
	}
	tools, err := s.runTools(ctx, req.Tools)
	if err != nil {
		return nil, err
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	if err := se.alive(); err != nil {
		return nil, err
	}
	se.used = time.Now()
	se.runs++
	se.info(s.cfg) // what describe gives while this runs
	se.refused.Store(refused)
	defer se.refused.Store(nil)

	lease := se.sandbox()
	idle := se.cpu.begin(lease, s.cfg.CPULimit, s.log())
	s.addIdleCPU(idle)
	lease.Arm(ctx, limits.Timeout, limits.CPUTime)
	rreq := fleet.HarnessRequest{
		Code:           req.Code,
		AllowedImports: se.imports.Modules,
		Profile:        se.imports.Label(),
		ImportHints:    se.imports.Hints,
		MaxResultBytes: MaxResultBytes,
		CapturePlots:   se.imports.Modules == nil || policy.Allows(se.imports.Modules, "matplotlib"),
		KeepAlive:      true,
		Context:        req.Context,
		NewContext:     req.NewContext,
		Cwd:            req.Cwd,
		Env:            req.Env,
		Display:        req.Display,
	}
	var handler fleet.ToolHandler
	if len(tools) > 0 {
		rreq.Tools = toolSpecs(tools)
		var done func()
		handler, done = s.toolCaller(ctx, tools, &se.id)
		defer done()
	}
	o := lease.Run(rreq, handler, req.OnOutput)
	if o.Ended {
		se.ended = endReason(o.Exit)
	} else {
		// Idle until the next request: no timeout but the session's own.
		lease.Arm(context.Background(), time.Until(se.created.Add(s.cfg.SessionMaxLifetime)), s.cfg.SessionMaxLifetime)
	}
	se.cpu.end(lease, s.cfg.IdleCPU, s.log())
	res := buildResult(se.id, se.backend, o, limits)
	res.Resources.IdleCPUSeconds = idle.Seconds()
	if o.Reply == nil {
		if res.Error == nil {
			res.Error = &ErrorInfo{Type: "SessionEnded", Message: "the interpreter ended"}
		}
		res.Error.Message += fmt.Sprintf("; session %s has ended (restart it with restart_session, or create a new one)", se.id)
		res.Success = false
	}
	return res, nil
}

// startCommand registers a command of se that is about to run; it returns
// the command's context (canceled when the session closes), the
// workspace and its uid, and done, to call when the command has ended.
func (se *session) startCommand(ctx context.Context) (context.Context, string, int, func(), error) {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	switch {
	case se.dropped:
		return nil, "", 0, nil, fmt.Errorf("%w: session %s is closed", ErrSessionNotFound, se.id)
	case se.dir == "":
		return nil, "", 0, nil, fmt.Errorf("%w: session %s is still starting; try again", ErrSessionEnded, se.id)
	}
	ctx, cancel := context.WithCancel(ctx)
	if se.commands == nil {
		se.commands = map[*context.CancelFunc]struct{}{}
	}
	se.commands[&cancel] = struct{}{}
	se.cmdsDone.Add(1)
	done := func() {
		cancel()
		se.touched.Store(time.Now().UnixNano())
		se.lifeMu.Lock()
		delete(se.commands, &cancel)
		se.lifeMu.Unlock()
		se.cmdsDone.Done()
	}
	return ctx, se.dir, se.uid, done, nil
}

func endReason(e fleet.Exit) string {
	switch {
	case e.Limit != fleet.LimitNone:
		return "killed at the " + string(e.Limit) + " limit"
	case e.Signal != 0:
		return fmt.Sprintf("the interpreter was killed by signal %d", e.Signal)
	}
	return fmt.Sprintf("the interpreter exited with status %d", e.ExitCode)
}

// sandbox returns the session's sandbox without waiting for a request in
// progress (nil before it first started).
func (se *session) sandbox() *fleet.Lease { return se.lease.Load() }

// alive reports whether the session's interpreter still runs; call with mu.
func (se *session) alive() error {
	if se.ended == "" {
		lease := se.sandbox()
		select {
		case <-lease.Done():
			se.ended = endReason(lease.Wait())
		default:
			return nil
		}
	}
	return fmt.Errorf("%w: %s %s; restart the session to keep its files, or create a new one", ErrSessionEnded, se.id, se.ended)
}

// info describes the session; call with mu. The description is kept for
// callers that come while a request runs.
func (se *session) info(cfg config.Config) SessionInfo {
	exp := se.used.Add(cfg.SessionIdleTTL)
	if hard := se.created.Add(cfg.SessionMaxLifetime); hard.Before(exp) {
		exp = hard
	}
	if d := se.deadline.Load(); d != 0 {
		exp = time.Unix(0, d)
	}
	info := SessionInfo{ID: se.id, Profiles: se.imports.Profiles, Backend: se.backend, CreatedAt: se.created, LastUsed: se.used, ExpiresAt: exp,
		Runs: se.runs, Ended: se.ended, Home: fleet.HomeOf(se.req.Home), Labels: se.req.Labels, Template: se.req.Template}
	se.last.Store(&info)
	return info
}

// RestartSession starts a fresh interpreter for a session, keeping its
// workspace files.
func (s *Service) RestartSession(ctx context.Context, id, owner string) (*SessionInfo, error) {
	return do(ctx, s, OpRestart, call[*SessionInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id},
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
	se.mu.Lock()
	defer se.mu.Unlock()
	lease := se.sandbox()
	if lease == nil {
		return nil, fmt.Errorf("%w: session %s has no sandbox", ErrSessionEnded, se.id)
	}
	s.addIdleCPU(se.cpu.settle(lease))
	// The same slot: a restart needs no room in the budget.
	replace := func(ctx context.Context, _ string, spec fleet.Spec) (*fleet.Lease, error) {
		return lease, lease.Replace(ctx, spec)
	}
	if err := s.startSession(ctx, se, replace); err != nil {
		return nil, err
	}
	info := se.info(s.cfg)
	return &info, nil
}

// CloseSession ends a session, its sandbox and its workspace.
func (s *Service) CloseSession(ctx context.Context, id, owner string) error {
	_, err := do(ctx, s, OpClose, call[struct{}]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id},
		run: func(context.Context) (struct{}, error) {
			se, err := s.session(id, owner)
			if err == nil {
				s.dropSession(se)
			}
			return struct{}{}, err
		},
		success: func(_ struct{}, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "close", Outcome: "success", Duration: took, Detail: id}
		},
	})
	return err
}

func (s *Service) dropSession(se *session) {
	s.sessions.dropping.RLock()
	defer s.sessions.dropping.RUnlock()
	s.sessions.mu.Lock()
	delete(s.sessions.byID, se.id)
	s.sessions.mu.Unlock()
	lease := se.sandbox()
	if lease != nil {
		s.addIdleCPU(se.cpu.settle(lease))
		lease.Kill(fleet.LimitCanceled) // a request in progress ends now, not at its timeout
	}
	se.lifeMu.Lock()
	if se.expiry != nil {
		se.expiry.Stop()
	}
	se.dropped = true
	for cancel := range se.commands {
		(*cancel)()
	}
	se.lifeMu.Unlock()
	se.cmdsDone.Wait() // their jails hold the workspace
	se.mu.Lock()
	defer se.mu.Unlock()
	if lease != nil {
		lease.Close() // its slot goes back to the budget
	}
	se.closeProxy()
	if se.dir != "" {
		removeWorkspace(se.dir)
	}
	if se.site != "" {
		removeWorkspace(se.site)
	}
	releaseWorkspaces(se.claim)
	se.claim = nil
	if se.uid != 0 {
		fleet.ReleaseUID(se.uid)
		se.uid = 0
	}
	if se.ended == "" {
		se.ended = "closed"
	}
}

// localSessions lists the owner's sessions on this replica.
func (s *Service) localSessions(owner string) []SessionInfo {
	s.sessions.mu.Lock()
	var list []*session
	for _, se := range s.sessions.byID {
		if se.owner == owner {
			list = append(list, se)
		}
	}
	s.sessions.mu.Unlock()
	out := make([]SessionInfo, 0, len(list))
	for _, se := range list {
		out = append(out, se.describe(s.cfg))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// reapSessions closes sessions idle past their TTL or past their lifetime.
func (s *Service) reapSessions() {
	now := time.Now()
	s.sessions.mu.Lock()
	var expired []*session
	for _, se := range s.sessions.byID {
		if !se.mu.TryLock() {
			continue // running a request: not idle
		}
		used := se.used
		if t := se.touched.Load(); t > used.UnixNano() {
			used = time.Unix(0, t)
		}
		se.lifeMu.Lock()
		busy := len(se.commands) > 0
		se.lifeMu.Unlock()
		idle := !busy && now.Sub(used) > s.cfg.SessionIdleTTL && se.deadline.Load() == 0 // a lifetime replaces the idle TTL
		if idle || now.Sub(se.created) > s.cfg.SessionMaxLifetime {
			expired = append(expired, se)
		}
		se.mu.Unlock()
	}
	s.sessions.mu.Unlock()
	for _, se := range expired {
		s.log().Info("session expired", "session", se.id, "owner", se.owner)
		s.dropSession(se)
	}
}

// reaper runs reapSessions until the service closes.
func (s *Service) reaper(stop <-chan struct{}) {
	every := min(s.cfg.SessionIdleTTL/4, time.Minute)
	t := time.NewTicker(max(every, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.reapSessions()
		case <-stop:
			return
		}
	}
}

// closeSessions ends every session (service shutdown).
func (s *Service) closeSessions() {
	s.sessions.mu.Lock()
	var all []*session
	for _, se := range s.sessions.byID {
		all = append(all, se)
	}
	s.sessions.mu.Unlock()
	for _, se := range all {
		s.dropSession(se)
	}
	// Drops that began elsewhere (an expiry, the reaper) end before the
	// service does: their workspaces are unmounted and removed.
	s.sessions.dropping.Lock()
	s.sessions.dropping.Unlock()
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

// SessionCount is the number of sessions open.
func (s *Service) SessionCount() int {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	return len(s.sessions.byID)
}

// GetSession describes one of the owner's sessions.
func (s *Service) GetSession(ctx context.Context, id, owner string) (*SessionInfo, error) {
	return do(ctx, s, OpGet, call[*SessionInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id},
		run: func(context.Context) (*SessionInfo, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return nil, err
			}
			info := se.describe(s.cfg)
			return &info, nil
		},
	})
}

// describe is the session as it is now, or, while a request runs in it,
// as it was when that request began: a description never waits for code.
func (se *session) describe(cfg config.Config) SessionInfo {
	if !se.mu.TryLock() {
		if last := se.last.Load(); last != nil {
			info := *last
			if d := se.deadline.Load(); d != 0 {
				info.ExpiresAt = time.Unix(0, d) // moved meanwhile
			}
			return info
		}
		se.mu.Lock() // never described yet: it is starting
	}
	defer se.mu.Unlock()
	if se.sandbox() != nil {
		_ = se.alive()
	}
	return se.info(cfg)
}
