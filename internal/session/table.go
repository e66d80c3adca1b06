package session

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// Table is a service's table of open sessions (lock order: at
// [Session]). It is safe for concurrent use.
type Table struct {
	cfg  config.Config
	log  *slog.Logger
	opts Options

	mu   sync.Mutex // protects byID and ending; never held while waiting for a run
	byID map[string]*Session
	// ending holds, for a session parked out of the table whose directories
	// are still being removed (Park, then Drop), a channel closed once they
	// are: the same id brought back waits for it (CreateFrom).
	ending map[string]chan struct{}
	// dropping is held (read) by each drop in progress, which may have
	// left the table already (an expiry): CloseAll takes it to wait for them.
	dropping sync.RWMutex
	// idleCPU is the CPU time sessions spent between requests (ns); atomic.
	idleCPU atomic.Int64
	// spares is set once, by StartSpares, before the table is shared.
	spares spares
}

// Options are what a table is given besides the configuration: the
// service's fleet and the few of its decisions a session's sandbox needs.
type Options struct {
	Log   *slog.Logger
	Fleet Fleet
	// Layer is the operator's package layer, bound into every session.
	Layer []fleet.Bind
	// NewID names a new session (it names the replica holding it).
	NewID func() string
	// Egress starts the egress proxy of a sandbox with the network
	// profile, on an environment's root ("": the host's); refused hears
	// of each host it refuses. trust is the host directory of its
	// authority's certificate (fleet.Work.Trust; "": none).
	Egress func(label, root string, refused func(host string)) (proxy *egress.Proxy, fwd *fleet.Forward, trust string)
	// Secrets gives the secrets of a session's credential bindings (nil:
	// none; every binding's tunnel is refused).
	Secrets func(owner, sessionID string) egress.SecretFunc
	// StartError says what a failure to get a sandbox means to the caller.
	StartError func(ctx context.Context, err error) error
	// Rebooted is told of a session whose sandbox started afresh on its
	// workspace (a resume after a pause without memory), as a machine's
	// boot: the service runs its environment's start command again. It
	// is called with the session's run lock held (its commands do not
	// take it); an error pauses the session again and is the resume's.
	Rebooted func(ctx context.Context, se *Session) error
}

// Fleet is what a table asks of the service's fleet (a *fleet.Fleet):
// sandboxes for its sessions, started afresh or from a memory image, and
// the budget its spare sessions are kept on (fleet.Keep).
type Fleet interface {
	Start(ctx context.Context, backend string, spec fleet.Spec) (*fleet.Lease, error)
	StartFromImage(ctx context.Context, dir string, w fleet.Work) (*fleet.Lease, error)
	fleet.Budgeted
}

// NewTable returns an empty table for the operator's configuration.
func NewTable(cfg config.Config, o Options) *Table {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Table{cfg: cfg, log: o.Log, opts: o, byID: map[string]*Session{},
		spares: spares{byBackend: map[string]*fleet.Kept[*Session]{}}}
}

// addIdleCPU counts CPU time sessions spent between requests.
func (t *Table) addIdleCPU(d time.Duration) {
	if d > 0 {
		t.idleCPU.Add(int64(d))
	}
}

// IdleCPU is the CPU time sessions have spent while no request ran in
// them, in all, since the table was made (reported when a session's next
// request starts, when it restarts, and when it closes).
func (t *Table) IdleCPU() time.Duration { return time.Duration(t.idleCPU.Load()) }

// ID is the session's id.
func (se *Session) ID() string { return se.id }

// Backend is where the session's sandbox runs: "native" or "gvisor".
func (se *Session) Backend() string { return se.backend }

// ProxyPort is the loopback port of the session's egress proxy in its
// sandbox (0: it has none).
func (se *Session) ProxyPort() int { return int(se.proxyPort.Load()) }

// Machine reports whether the session is a machine (Request.Machine).
func (se *Session) Machine() bool { return se.req.Machine }

// RootInside reports whether the session's processes may run as root
// inside its sandbox: a machine's, on a block of ids of its own (both
// backends map it in a user namespace of the sandbox's own).
func (se *Session) RootInside() bool {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	return se.req.Machine && fleet.RootInside(se.uid)
}

// Created is when the session started; it never changes.
func (se *Session) Created() time.Time { return se.created }

// Deadline is when the session's lifetime ends it (zero: no lifetime
// was set; the idle TTL applies).
func (se *Session) Deadline() time.Time {
	if d := se.deadline.Load(); d != 0 {
		return time.Unix(0, d)
	}
	return time.Time{}
}

// Imports is the session's import policy. It is read without the run
// lock: its profiles never change; its modules grow, under the run lock,
// with what pip installs (Allow).
func (se *Session) Imports() policy.ImportPolicy { return se.imports }

// Home is where the session's workspace is in its sandbox.
func (se *Session) Home() string { return fleet.HomeOf(se.req.Home) }

// Env are the environment variables of the session's runs and commands.
func (se *Session) Env() map[string]string { return se.req.Env }

// Environment is the environment the session's sandboxes start from
// (zero: the host's root); fixed once it is in the table.
func (se *Session) Environment() envstore.Env { return se.env }

// Request is what the session was opened with (fixed once it is in the
// table).
func (se *Session) Request() Request {
	req := se.req
	req.Network = se.Network()
	req.Credentials = se.Credentials()
	return req
}

// Workspace is the session's workspace on the host: its directory, its
// package directory, the uid of its sandboxes (0: each its own, rootless),
// and whether the directory is a tmpfs of its own whose size is its quota.
// All empty until the session first starts.
func (se *Session) Workspace() (dir, site string, uid int, quota bool) {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	return se.dir, se.site, se.uid, se.quota
}

// Tmp is the host directory of the session's /tmp, shared by its
// interpreter and commands; "" when its sandbox keeps its own (gVisor).
func (se *Session) Tmp() string {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	return se.tmp
}

// MachineRoot is the host directory of a machine session's own / (""
// for any other session).
func (se *Session) MachineRoot() string {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	return se.root
}

// OpenRootDir opens dir of the session's running sandbox as its code
// sees it (a machine's /usr and /etc with root's changes), for reading.
func (se *Session) OpenRootDir(dir string) (*os.File, error) {
	lease := se.sandbox()
	if lease == nil {
		return nil, fleet.ErrNoRootView
	}
	return lease.OpenRootDir(dir)
}

// SandboxUID is the host uid of the session's sandbox, so that what the
// file API creates is the code's to change; -1 before it first starts.
func (se *Session) SandboxUID() int {
	if lease := se.sandbox(); lease != nil {
		return lease.HostUID()
	}
	if _, _, uid, _ := se.Workspace(); uid != 0 {
		return uid // paused without its sandbox: the session's own uid
	}
	return -1
}

// Lock takes the session's run lock: one request at a time (code, pip),
// held for the whole request. Never under the table's lock.
func (se *Session) Lock() { se.mu.Lock() }

// Unlock releases the run lock.
func (se *Session) Unlock() { se.mu.Unlock() }

// Allow lets the session import modules (what pip installed into it);
// call with the run lock.
func (se *Session) Allow(modules []string) {
	for _, m := range modules {
		if !slices.Contains(se.installed, m) {
			se.installed = append(se.installed, m)
		}
	}
	if se.imports.Modules == nil {
		return
	}
	for _, m := range modules {
		if !slices.Contains(se.imports.Modules, m) {
			// Clipped: the list may be shared (the service's import cache).
			se.imports.Modules = append(slices.Clip(se.imports.Modules), m)
		}
	}
}

func quote(s string) string { return bounded.Quote(s) }
