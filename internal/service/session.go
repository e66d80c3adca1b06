package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

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

// sandbox returns the session's sandbox without waiting for a request in
// progress (nil before it first started).
func (se *session) sandbox() *fleet.Lease { return se.lease.Load() }

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
