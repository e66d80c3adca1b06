// Package session owns the sessions of one service: the table of open
// sessions, each session's state and locks, its lifecycle (expiry,
// lifetime, the reaper, restart, drop), its workspace (claimed, reclaimed
// at start, created with its quota), its CPU between requests, the spare
// sessions kept ready, and the mechanics of running in a session (code
// in its interpreter, commands beside it).
//
// It sits between the fleet, which gives it sandboxes, and the service,
// which keeps what a request means: import profiles, limits, code-mode
// tools, results, audit events, forwarding and admission. The service
// resolves a session's shape and hands it here; it reaches a session's
// state only through the methods of [Table] and [Session]. The lock
// order is written at [Session].
package session

import (
	"cmp"
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
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// Session errors. The service classifies them (service.ErrorKind); its
// own names for them are these values.
var (
	// ErrNotFound: no such session, or not the caller's.
	ErrNotFound = errors.New("session not found")
	// ErrEnded: the session's interpreter was killed (timeout, memory,
	// output limit); restart it or create a new one.
	ErrEnded = errors.New("session ended")
	// ErrTooMany: SANDBOX_MAX_SESSIONS are open.
	ErrTooMany = errors.New("too many sessions")
	// ErrKeyLimit: the owner (an API key) holds its share of the server
	// (SANDBOX_KEY_MAX_SESSIONS, SANDBOX_KEY_MAX_WATCHES).
	ErrKeyLimit = errors.New("key limit")
	// ErrUnavailable: the host cannot give a session what it needs (a
	// workspace, a uid, a sandbox). It is the service's ErrUnavailable.
	ErrUnavailable = errors.New("sandbox unavailable")
	// ErrPaused: the session is paused, and the request does not resume it.
	ErrPaused = errors.New("session paused")
)

// Request opens a session.
type Request struct {
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
	// OnTimeout is what the session's lifetime ends in: "kill" (or empty)
	// ends it, "pause" pauses it, its memory kept, until a resume;
	// "pause_files" pauses it without its memory (E2B's keepMemory false).
	OnTimeout string `json:",omitempty"`
	// ManualResume: a paused session answers only a resume (the E2B SDK's
	// default); otherwise the next request resumes it.
	ManualResume bool `json:",omitempty"`
	// FromSnapshot starts the session from one of the owner's snapshots:
	// its workspace, and its interpreter's state.
	FromSnapshot string `json:",omitempty"`
	// PublicTraffic: the servers the session's code listens with are
	// reachable through the E2B surface without the sandbox's traffic
	// token (E2B's allowPublicTraffic); otherwise the token is needed.
	PublicTraffic bool `json:",omitempty"`
	// Servers: the session's commands may listen on TCP ports of their
	// loopback (python3 -m http.server), reached with the service's
	// OpenPort; otherwise Landlock refuses every TCP bind.
	Servers bool `json:",omitempty"`
	// Environment names the environment (envstore) the session's
	// interpreter and commands start from; "": the host's root.
	Environment string `json:",omitempty"`
	// Network are the session's own egress rules, within the operator's
	// allow list (nil: that list alone); SetNetwork changes them, and
	// Request gives back the rules in force, which parks and snapshots
	// keep.
	Network *egress.NetworkRules `json:",omitempty"`
	// Credentials bind the owner's secrets to egress rules: the proxy
	// adds them to the session's HTTPS requests (egress.Binding). Names
	// only: a park, a snapshot and a fork keep these, never a value.
	Credentials []egress.Binding `json:",omitempty"`
	// Machine makes the session a small computer: its interpreter and
	// every command run in one process tree (fleet.Work.Machine), where
	// what a command leaves running lives on, and its commands may run
	// any program of its root unless the operator keeps a list. Machine
	// spares (StartMachineSpares) serve those of their shape.
	Machine bool `json:",omitempty"`
}

// Info describes a session.
type Info struct {
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
	// State is "running" or "paused".
	State string `json:"state"`
	// PausedAt is when a paused session was paused.
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// OnTimeout is "kill", "pause" or "pause_files": what the end of its
	// lifetime does.
	OnTimeout string `json:"on_timeout"`
	// AutoResume: the next request resumes the session when it is paused.
	AutoResume bool `json:"auto_resume"`
	// FromSnapshot is the snapshot the session started from.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// PublicTraffic: its ports are reachable without its traffic token.
	PublicTraffic bool `json:"public_traffic,omitempty"`
	// Environment is the environment it started from ("": the host's root).
	Environment string `json:"environment,omitempty"`
	// Network are its own egress rules (none: the operator's allow list
	// alone), for a session with the network profile.
	Network *egress.NetworkRules `json:"network,omitempty"`
	// EgressCredentials are its credential bindings (names, never values).
	EgressCredentials []egress.Binding `json:"egress_credentials,omitempty"`
	// Machine: the session is a machine (Request.Machine).
	Machine bool `json:"machine,omitempty"`
}

// Shape is what the service resolved a session's request to: its import
// policy, its sandbox's limits, its backend and the environment it
// starts from (req.Environment's record; zero: the host's root).
type Shape struct {
	Imports policy.ImportPolicy
	Limits  fleet.Limits
	Backend string
	Env     envstore.Env
}

// Session is one interpreter kept alive in its own sandbox, like a
// notebook kernel, with a workspace that outlives a restart.
//
// Lock order (the session table's and a session's locks):
//
//	Table.dropping (read, around a whole drop; CloseAll's write waits for the drops)
//	  Table.mu
//	    Session.mu (TryLock only: reaper, describe; a blocking Lock only on a
//	                session no one else can hold yet: a fresh spare, a new session)
//	      Session.lifeMu
//
// contexts.mu (Session.contexts, its code contexts), sessionLog.mu
// (Session.log, its log) and Session.netMu (its egress rules and proxy)
// are leaves under any of them or none. sessionCPU.mu (Session.cpu) is a leaf: taken under Session.mu or under
// no lock, never with lifeMu, and it takes none. A pause and a resume
// pause and resume the commands' sandboxes under lifeMu (after mu); a
// lease's own locks are leaves below every lock here.
//
// Session.mu is the run lock (Lock, BeginRun): held for a whole request,
// up to its timeout: a blocking Lock of a published session under
// Table.mu would freeze every session for that long. Drop takes them one
// after the other, not nested: Table.mu, then lifeMu, then waits for
// cmdsDone, then mu. The atomics (deadline, last, touched, lease,
// refused) exist so that readers need not take mu.
type Session struct {
	mu sync.Mutex // one request at a time; protects the fields below unless they say otherwise
	// id, owner and req are set before the session is in the table (a
	// spare's under mu and Table.mu) and not changed after.
	id      string
	owner   string
	req     Request
	imports policy.ImportPolicy
	// env is the environment its sandboxes start from (zero: the host's
	// root), as resolved when it was created: a restart keeps it.
	env envstore.Env
	// installed are the modules pip_install added to imports (under mu):
	// a snapshot keeps them with its packages.
	installed []string
	limits    fleet.Limits
	// dir, site, tmp, quota and uid are written once, under mu and lifeMu
	// (start), and read under either: commands read them under
	// lifeMu while code runs under mu.
	dir string // host directory of the workspace
	// quota: dir is a tmpfs of its own, whose size is the workspace's
	// limit (the file API asks the kernel how full it is).
	quota bool
	site  string // host directory of its installed packages
	// tmp is the host directory of its /tmp, shared by its interpreter
	// and its commands (native sessions; "" under gVisor, whose /tmp is
	// its sandbox's own, kept in its memory image).
	tmp string
	// root is a machine session's own / on the host ("": none).
	root string
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
	// expiry is the timer that does it. deadline is atomic; expiry is
	// protected by lifeMu.
	deadline atomic.Int64 // unix nanoseconds
	// last is the latest description (info), for describe; atomic.
	last   atomic.Pointer[Info]
	expiry *time.Timer
	// lifetime is the last lifetime given (ExpireAfter), what a session
	// paused at its timeout gets again when it resumes; under lifeMu.
	lifetime time.Duration
	// lifeMu protects expiry, lifetime, dropped and commands: what callers
	// reach while code runs under mu. Taken after mu, never before it.
	lifeMu  sync.Mutex
	dropped bool
	// commands are the session's commands running now (they run beside
	// its interpreter, as processes of a VM do), canceled when it closes;
	// cmdsDone is when the last one ended. touched is the last time one
	// ended (unix nanoseconds, atomic): activity, for the idle TTL.
	commands map[*context.CancelFunc]*cmdSandbox
	cmdsDone sync.WaitGroup
	touched  atomic.Int64
	// frozen: the session is paused in memory, and so are its commands'
	// sandboxes, and any that starts meanwhile (under lifeMu).
	frozen bool
	// watches are the directory watches on its workspace (watch.go),
	// each by the function that stops it; watchesOff: none may start
	// (paused). Under lifeMu.
	watches    map[*func()]struct{}
	watchesOff bool

	// lease is the session's sandbox and its slot of the budget, held
	// for the session's life (a restart replaces the sandbox, not the
	// slot); nil until it first starts. Atomic.
	lease atomic.Pointer[fleet.Lease]
	// netns is the session's network namespace (native sessions): its
	// first interpreter's, held for the session's life, which its later
	// interpreters (restarts) and its commands join, so that they reach
	// each other's loopback servers; closed by Drop once no command
	// runs. Atomic; nil under gVisor, whose network is runsc's own.
	netns atomic.Pointer[fleet.NetNS]
	// proxy is the egress proxy of a session with the network profile,
	// for the life of its sandbox (written under mu and netMu, read under
	// either); refused (atomic) is told of the hosts it refuses during the
	// request in progress.
	proxy   *egress.Proxy
	refused atomic.Pointer[func(host string)]
	// proxyPort is where the sandbox reaches its proxy on its loopback
	// (0: no proxy); atomic, for a machine's commands.
	proxyPort atomic.Int32
	// network are the session's egress rules in force (nil: none), under
	// netMu, a leaf: SetNetwork changes them while code runs.
	netMu   sync.Mutex
	network *egress.NetworkRules
	// credentials are its credential bindings, under netMu; secretsOf
	// gives their secrets (Options.Secrets).
	credentials []egress.Binding
	secretsOf   func(owner, id string) egress.SecretFunc
	// trust is the host directory of its proxy's authority certificate
	// (fleet.Work.Trust), for its commands; under netMu.
	trust string
	// cpu is the sandbox's CPU bandwidth: full during requests, the idle
	// allowance between them. Its own lock protects it.
	cpu sessionCPU
	// mark is the previous metrics sample (CPUSinceLastSample); atomic.
	mark atomic.Pointer[usageMark]
	// contexts are its code contexts (contexts.go), under their own lock.
	contexts contexts
	// log is its log (logs.go), under its own lock.
	log sessionLog

	// paused says what a paused session kept (pause.go); pausedAt is when
	// it paused and leftAtPause what was left of its lifetime then. Under
	// mu. A cold pause has no lease (nil).
	paused      pauseState
	pausedAt    time.Time
	leftAtPause time.Duration
	// restore is the snapshot the session is being started from, during
	// its first start (under mu).
	restore *RestoreFrom
}

// Get returns the owner's session id, or ErrNotFound.
func (t *Table) Get(id, owner string) (*Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	se, ok := t.byID[id]
	if !ok || se.owner != owner {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, quote(id))
	}
	return se, nil
}

// closeProxy ends the session's egress proxy, if it has one; call with mu.
func (se *Session) closeProxy() {
	se.netMu.Lock()
	p := se.proxy
	se.proxy = nil
	se.netMu.Unlock()
	if p != nil {
		p.Close()
	}
}

// useProxy makes p the session's egress proxy, with the rules in force;
// call with mu. A proxy whose rules cannot be set is closed: it must
// never run wider than its session asked.
func (se *Session) useProxy(p *egress.Proxy) error {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	rules := egress.NetworkRules{}
	if se.network != nil {
		rules = *se.network
	}
	if err := p.SetRules(rules); err != nil {
		p.Close()
		return err
	}
	if err := p.SetBindings(se.credentials, se.secrets(se.id)); err != nil {
		p.Close()
		return err
	}
	se.proxy = p
	return nil
}

// Network returns the session's egress rules in force (nil: none).
func (se *Session) Network() *egress.NetworkRules {
	se.netMu.Lock()
	defer se.netMu.Unlock()
	return se.network
}

// sandbox returns the session's sandbox without waiting for a request in
// progress (nil before it first started).
func (se *Session) sandbox() *fleet.Lease { return se.lease.Load() }

// info describes the session; call with mu. The description is kept for
// callers that come while a request runs.
func (se *Session) info(cfg config.Config) Info {
	exp := se.used.Add(cfg.SessionIdleTTL)
	if hard := se.created.Add(cfg.SessionMaxLifetime); hard.Before(exp) {
		exp = hard
	}
	if d := se.deadline.Load(); d != 0 {
		exp = time.Unix(0, d)
	}
	info := Info{ID: se.id, Profiles: se.imports.Profiles, Backend: se.backend, CreatedAt: se.created, LastUsed: se.used, ExpiresAt: exp,
		Runs: se.runs, Ended: se.ended, Home: fleet.HomeOf(se.req.Home), Labels: se.req.Labels, Template: se.req.Template,
		State: "running", OnTimeout: cmp.Or(se.req.OnTimeout, "kill"), AutoResume: !se.req.ManualResume, FromSnapshot: se.req.FromSnapshot,
		PublicTraffic: se.req.PublicTraffic, Environment: se.req.Environment, Network: se.Network(), Machine: se.req.Machine,
		EgressCredentials: se.Credentials()}
	if se.paused != running {
		info.State = "paused"
		at := se.pausedAt
		info.PausedAt = &at
	}
	se.last.Store(&info)
	return info
}

// List describes the owner's sessions, oldest first.
func (t *Table) List(owner string) []Info {
	t.mu.Lock()
	var list []*Session
	for _, se := range t.byID {
		if se.owner == owner {
			list = append(list, se)
		}
	}
	t.mu.Unlock()
	out := make([]Info, 0, len(list))
	for _, se := range list {
		out = append(out, se.describe(t.cfg))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Count is the number of sessions open.
func (t *Table) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// Describe is the session as it is now, or, while a request runs in it,
// as it was when that request began: a description never waits for code.
func (t *Table) Describe(se *Session) Info { return se.describe(t.cfg) }

func (se *Session) describe(cfg config.Config) Info {
	if !se.mu.TryLock() {
		if last := se.last.Load(); last != nil {
			info := *last
			if d := se.deadline.Load(); d != 0 {
				info.ExpiresAt = time.Unix(0, d) // moved meanwhile
			}
			info.Network = se.Network() // set meanwhile
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
