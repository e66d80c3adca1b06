// Package config is the operator's configuration: one struct, the table of
// settings (each named once for the JSON file, the environment and the
// flags) and the one loader, Load. Nothing else reads SANDBOX_* variables
// (TestOnlyTheLoaderReadsSandboxVariables). What a request may do is
// decided in internal/policy, from the parts of Config it is handed.
package config

import (
	"os"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/policy"
)

// Config is the operator's configuration. Values come from flags, SANDBOX_*
// environment variables and an optional JSON file, in that order of
// precedence, over the defaults of [DefaultConfig].
//
// To add a setting:
//  1. add a field here, with a comment saying what it bounds or chooses;
//  2. give it its default in DefaultConfig (or leave the zero value);
//  3. add one entry to settings (settings.go: key, SANDBOX_ variable, usage,
//     and the typed helper from kinds.go that parses and checks it): that makes the
//     JSON key, the variable and the --flag, and lists it in -h;
//  4. check it against other settings in validate (load.go), if it must be;
//  5. run `go generate ./internal/config`, which writes its row of
//     docs/configuration.md's reference (give the entry a doc or shown
//     text where its usage or default value says too little);
//  6. hand the value to whoever needs it (e.g. sandbox.New's cfg, or
//     server.Run); never read the variable anywhere else.
type Config struct {
	Timeout      time.Duration // default wall-clock limit of a run
	MaxTimeout   time.Duration // the most a request may ask for
	CPUTime      time.Duration // default CPU-time limit
	MaxCPUTime   time.Duration
	CPULimit     float64 // CPU bandwidth of every sandbox, in cores
	IdleCPU      float64 // a session's CPU bandwidth while no request runs in it, in cores
	MemoryLimit  int64   // default memory limit
	DataMemory   int64   // default memory limit of data_science runs
	MaxMemory    int64
	OutputSize   int64 // default cap on stdout and stderr, each
	MaxOutput    int64
	MaxProcesses int
	MaxFileSize  int64
	MaxOpenFiles int
	TmpSize      int64
	WorkspaceMax int64
	MaxCodeSize  int64

	// Operator is what requests may ask for (profiles, imports): the part
	// the import decisions read.
	policy.Operator
	// NetworkAllow lists the hosts the network profile may reach.
	NetworkAllow []string
	// EgressRoots is a PEM file of authorities the egress proxy trusts,
	// besides the host's, for the servers of the HTTPS tunnels it opens to
	// add a credential ("": the host's alone).
	EgressRoots string
	// EgressCredentials is a JSON file of the operator's egress
	// credentials: bindings every sandbox with the network profile gets,
	// their values read from the server's environment or files.
	EgressCredentials string
	// EnableContainerMode allows use_container (the gVisor backend).
	EnableContainerMode bool
	// RequireUserNamespace refuses to serve when this process runs on the
	// host's own user ids: set where it was promised a user namespace (a
	// pod with hostUsers: false), which some runtimes ignore silently.
	RequireUserNamespace bool
	// Isolation is the backend of a request that does not ask for one:
	// "native" (the jail) or "gvisor" (every run under runsc).
	Isolation string
	// Runsc is gVisor's runsc binary (empty: the one scripts/setup.sh
	// builds, else runsc on PATH).
	Runsc string
	// GVisorPlatform is gVisor's platform: auto (systrap where runsc has
	// it, else ptrace), systrap, ptrace or kvm.
	GVisorPlatform string
	// GVisorPoolSize and GVisorDataPoolSize are the gVisor sandboxes kept
	// ready (basic, and data_science with numpy and pandas loaded) when
	// the gVisor backend is in use.
	GVisorPoolSize, GVisorDataPoolSize int
	// Interpreter is the Python inside the jail.
	Interpreter string

	// PoolSize is how many basic sandboxes wait ready; DataPoolSize the
	// same for data_science (numpy and pandas preloaded).
	PoolSize, DataPoolSize int
	// MaxSandboxes bounds the sandboxes that exist at once, pooled or not.
	MaxSandboxes int
	// QueueTimeout bounds the wait for a sandbox when MaxSandboxes are busy.
	QueueTimeout time.Duration
	// PoolMaxIdle is how long a ready sandbox may wait before it is replaced.
	PoolMaxIdle time.Duration
	// Zygote forks pooled sandboxes from a loaded interpreter (with cgroups;
	// else whole jails are kept warm).
	Zygote bool
	// EnvPoolSize is how many sandboxes of an environment wait ready once
	// a run has used it (0: none, each run starts its own); EnvPoolIdle
	// how long such a pool, and its zygote, live unused.
	EnvPoolSize int
	EnvPoolIdle time.Duration

	// MaxSessions bounds the sessions open at once.
	MaxSessions int
	// MaxWatches bounds the directory watches open at once, server-wide
	// (each is an inotify instance, and those are counted per host user);
	// SessionMaxWatches bounds a session's; WatchMaxDirs bounds the
	// directories one recursive watch covers (one inotify watch each).
	MaxWatches, SessionMaxWatches, WatchMaxDirs int
	// KeyMaxSessions and KeyMaxWatches are one API key's share of
	// MaxSessions (paused sessions and forks included) and of MaxWatches,
	// so that one tenant cannot take them all; 0: no share (the key may
	// use the whole bound); KeyShareAuto until ResolveKeyShares.
	KeyMaxSessions, KeyMaxWatches int
	// SessionPoolSize and GVisorSessionPoolSize are the sessions started
	// ahead of create_session (default profiles and memory), natively and
	// under gVisor (when it is in use).
	SessionPoolSize, GVisorSessionPoolSize int
	// MachinePoolSize is the machine sessions started ahead of create,
	// natively, in the shape machines are asked for most: E2B's
	// sandboxes when E2BListen is set, else machine: true sessions.
	MachinePoolSize int
	// SessionIdleTTL closes a session nobody used for that long.
	SessionIdleTTL time.Duration
	// SessionMaxLifetime closes a session that old, used or not.
	SessionMaxLifetime time.Duration
	// StateDir holds session workspaces (and later the audit database).
	StateDir string

	// Callers' limits (HTTP and MCP surfaces; per API key).
	RateLimit      float64 // requests per second per key (0: off; RateAuto: see ResolveCallerLimits)
	RateBurst      int
	KeyConcurrency int // requests running at once per key (0: off, as on a server without keys)
	MaxConcurrent  int // requests running at once in all
	QueueSize      int // requests that may wait for a slot
	// MaxTransfers bounds the file downloads and uploads in progress at
	// once (each holds a fixed buffer and a file); past it: busy.
	MaxTransfers int

	// Server settings (codecage serve).
	Listen    string // REST, MCP and metrics; beyond loopback only with API keys
	E2BListen string // the E2B SDKs' API too, when set
	E2BDomain string // sandbox hosts are <port>-<id>.<E2BDomain>; "" = localhost:<E2B port>
	// E2BPublicTraffic: an E2B sandbox's ports are reached without its
	// traffic token unless its create says allowPublicTraffic false (E2B's
	// default); off, the token is needed unless the create says true.
	E2BPublicTraffic bool
	// MachineSessions: a session may be a machine (its commands in its
	// own process tree, any program of its root), and every E2B sandbox
	// on the native backend is one; off, commands keep to the allow-list.
	MachineSessions bool
	// MachineRoot: a machine session (either backend) has root inside (its own
	// block of ids, user: root, sudo, a writable /usr); off, its
	// processes all run as its user, on one uid.
	MachineRoot   bool
	APIKeys       string // "name:key,..."; never printed
	APIKeysFile   string
	MaxBodySize   int64
	ReadTimeout   time.Duration
	WriteTimeout  time.Duration
	ShutdownGrace time.Duration
	AuditDB       string // "" = the default path
	AuditCode     bool   // store the code itself, not only its hash
	AuditBuffer   int
	LogFormat     string // text or json
	LogLevel      string // debug, info, warn, error

	// Every listener's door (codecage serve): a keep-alive connection idle
	// IdleTimeout is closed; at most MaxConnections are open on a listener,
	// MaxConnectionsPerClient from one client address.
	IdleTimeout             time.Duration
	MaxConnections          int
	MaxConnectionsPerClient int
	// StreamWriteTimeout bounds each write of a stream (run output, MCP
	// notifications, E2B and peer streams): a client that stops reading
	// loses its connection then, and its run never waits for it.
	StreamWriteTimeout time.Duration

	// Cluster (several replicas, one service): see internal/cluster.
	ReplicaURL  string // where the other replicas reach this one; "" = a single server
	ReplicaName string // for people; "" = the host name
	PeerSecret  string // replicas authenticate each other with it; never printed

	// Kernels are the languages besides Python a session's code may run in
	// (javascript, typescript, bash); nil: none, or all when the E2B
	// surface is on.
	Kernels []string

	// Commands (run_command).
	AllowedCommands []string      // programs a command line may run
	CommandTimeout  time.Duration // default wall-clock limit of a command
	MaxCommandTime  time.Duration

	// Packages (pip_install).
	BlockedPackages []string // refused package names (PEP 503-normalized when compared)
	PipIndexURL     string   // the index pip may reach through the egress proxy
	PipFindLinks    string   // a local wheelhouse: installs need no network
	PipMaxDownload  int64    // bytes pip may download (its scratch space)
	PipMaxInstall   int64    // bytes a session's installed packages may take
	PipTimeout      time.Duration
	// Code mode: upstream MCP servers whose tools code may call.
	ToolsConfig    string        // JSON file of upstream servers
	ToolsMaxCalls  int           // tool calls per execution
	ToolsMaxResult int64         // bytes of one tool result
	ToolsTimeout   time.Duration // per call
	// GatewayMaxCalls bounds a sandbox's MCP gateway's tool calls.
	GatewayMaxCalls int

	// Snapshots (paused sessions and named snapshots; internal/snapstore).
	// SnapshotStore is where they are kept: "" = the postgres:// AuditDB
	// when it is one (replicas share it), else StateDir/snapshots; or an
	// absolute directory, or a postgres:// URL (see SnapshotPlace).
	SnapshotStore string
	// SnapshotSecret seals snapshots (HMAC-SHA256); never printed. Empty:
	// a directory store generates one into StateDir/snapshot-secret; a
	// PostgreSQL store refuses to open without it.
	SnapshotSecret string
	// Per owner: at most SnapshotMaxBytes in at most SnapshotMaxCount
	// snapshots, each kept SnapshotTTL.
	SnapshotMaxBytes int64
	SnapshotMaxCount int
	SnapshotTTL      time.Duration
	// PausedInMemoryTTL is how long a session stays paused with its
	// memory held here before it is parked in the store (its memory and
	// slot freed; a resume brings it back from the store).
	PausedInMemoryTTL time.Duration
	// ParkOnShutdown: on SIGTERM every session is parked in the store, so
	// that a restart, or another replica, resumes it.
	ParkOnShutdown bool

	// PackagesDir holds the operator's package layer (codecage packages
	// install), read-only in every sandbox.
	PackagesDir string

	// Environments (codecage env, /environments). OperatorKeys are the
	// API keys that may build and remove them; EnvMaxBuilds builds run at
	// once, each within EnvBuildTimeout; a requirements build's layer is
	// at most EnvMaxLayer bytes; EnvDebianMirror is mmdebstrap's mirror
	// ("": envbuild's default), and EnvDebianCache keeps what Debian
	// builds download ("": nothing kept).
	OperatorKeys    []string
	EnvMaxBuilds    int
	EnvBuildTimeout time.Duration
	EnvMaxLayer     int64
	EnvDebianMirror string
	EnvDebianCache  string
	// EnvReadyTimeout bounds how long a session from an environment with a
	// ready command waits for it to succeed before the session fails.
	EnvReadyTimeout time.Duration
	// EnvironmentsDir holds the built environments ("": the state
	// directory's environments/); DefaultEnvironment is the environment
	// of runs and sessions that name none ("": the host's root).
	EnvironmentsDir    string
	DefaultEnvironment string
}

// RateAuto, the default SANDBOX_RATE_LIMIT, is DefaultKeyRate per API key
// when the server has keys, and no rate limit when it has none (see
// ResolveCallerLimits).
const RateAuto = -1

// DefaultKeyRate is the per-key rate (requests per second) that RateAuto
// means on a server with API keys.
const DefaultKeyRate = 20

// ResolveCallerLimits settles the per-key limits for a server with or
// without API keys. Without keys the server listens on loopback only and
// has one caller, its operator: a burst (an evaluation loop, say) waits in
// the global queue (SANDBOX_QUEUE_SIZE, SANDBOX_QUEUE_TIMEOUT) for a slot
// rather than being refused, so neither the rate (when auto) nor the
// per-key concurrency applies; the global cap and the bounded queue still
// protect the machine. With keys, each key is held to its concurrency and
// to DefaultKeyRate when the rate is auto.
func (c *Config) ResolveCallerLimits(haveKeys bool) {
	if !haveKeys {
		c.KeyConcurrency = 0 // per key means per caller: one caller here, governed by the global cap
	}
	if c.RateLimit != RateAuto {
		return
	}
	c.RateLimit = 0
	if haveKeys {
		c.RateLimit = DefaultKeyRate
	}
}

// KeyShareAuto, the default SANDBOX_KEY_MAX_SESSIONS and
// SANDBOX_KEY_MAX_WATCHES, is half the server-wide bound per key on a
// server with two or more API keys, and no share with one key or none
// (see ResolveKeyShares).
const KeyShareAuto = -1

// ResolveKeyShares settles each API key's share of the sessions and the
// watches, for a server with keys API keys. Without keys there is one
// caller, who has the whole server; with one key, so has that key. With
// more, auto is half of each server-wide bound (at least one), so that no
// tenant can take everything and lock the others out; the server-wide
// bound still holds on top of the shares.
func (c *Config) ResolveKeyShares(keys int) {
	resolve := func(share *int, bound int) {
		switch {
		case keys == 0:
			*share = 0 // per key means per caller: one caller here
		case *share != KeyShareAuto:
		case keys == 1:
			*share = 0
		default:
			*share = max(bound/2, 1)
		}
	}
	resolve(&c.KeyMaxSessions, c.MaxSessions)
	resolve(&c.KeyMaxWatches, c.MaxWatches)
}

// AccessLimits are the callers' limits for an access.Gate. A rate still
// RateAuto (no front door resolved it: stdio MCP, the CLI) is no limit.
func (c *Config) AccessLimits() access.Limits {
	return access.Limits{Rate: max(c.RateLimit, 0), Burst: c.RateBurst, PerKey: c.KeyConcurrency,
		Global: c.MaxConcurrent, Queue: c.QueueSize, QueueTimeout: c.QueueTimeout}
}

// DefaultConfig is the configuration with nothing set.
func DefaultConfig() Config {
	return Config{
		Timeout:      30 * time.Second,
		MaxTimeout:   300 * time.Second,
		CPUTime:      30 * time.Second,
		MaxCPUTime:   300 * time.Second,
		CPULimit:     1,
		IdleCPU:      0.1, // a background server answers; a spinning thread costs the host little
		MemoryLimit:  128 << 20,
		DataMemory:   1 << 30,
		MaxMemory:    4 << 30,
		OutputSize:   1 << 20,
		MaxOutput:    16 << 20,
		MaxProcesses: 64,
		MaxFileSize:  64 << 20,
		MaxOpenFiles: 256,
		TmpSize:      64 << 20,
		WorkspaceMax: 64 << 20,
		MaxCodeSize:  4 << 20,
		Interpreter:  "/usr/bin/python3",

		PoolSize:           4,
		DataPoolSize:       2, // one numpy cell is used while the next is forked: back-to-back runs then find one ready
		Isolation:          IsolationNative,
		GVisorPlatform:     "auto",
		GVisorPoolSize:     2,
		GVisorDataPoolSize: 1,
		MaxSandboxes:       32,
		QueueTimeout:       10 * time.Second,
		PoolMaxIdle:        10 * time.Minute,
		Zygote:             true,
		MachineSessions:    true,
		MachineRoot:        true,
		EnvPoolSize:        1,
		EnvPoolIdle:        10 * time.Minute,

		MaxSessions:           16,
		MaxWatches:            32,
		KeyMaxSessions:        KeyShareAuto,
		KeyMaxWatches:         KeyShareAuto,
		SessionMaxWatches:     4,
		WatchMaxDirs:          1024,
		SessionPoolSize:       1,
		MachinePoolSize:       1,
		GVisorSessionPoolSize: 1,
		SessionIdleTTL:        15 * time.Minute,
		SessionMaxLifetime:    4 * time.Hour,
		StateDir:              defaultStateDir(),

		RateLimit:      RateAuto,
		RateBurst:      40,
		KeyConcurrency: 16,
		MaxConcurrent:  32,
		QueueSize:      64,
		MaxTransfers:   16,

		Listen:        "127.0.0.1:8001",
		MaxBodySize:   1 << 20,
		ReadTimeout:   60 * time.Second,
		WriteTimeout:  360 * time.Second,
		ShutdownGrace: 30 * time.Second,
		AuditCode:     true,
		AuditBuffer:   4096,
		LogFormat:     "text",
		LogLevel:      "info",

		// Room for many agents' keep-alive pools, far below the open-file
		// limit (half of which is kept for sandboxes anyway).
		IdleTimeout:             30 * time.Second,
		MaxConnections:          1024,
		MaxConnectionsPerClient: 256,
		StreamWriteTimeout:      10 * time.Second,

		AllowedCommands: policy.DefaultCommands,
		CommandTimeout:  120 * time.Second,
		MaxCommandTime:  300 * time.Second,

		BlockedPackages: policy.DefaultBlockedPackages,
		PipIndexURL:     "https://pypi.org/simple",
		PipMaxDownload:  256 << 20,
		PipMaxInstall:   512 << 20,
		PipTimeout:      300 * time.Second,

		EnvMaxBuilds:    1,
		EnvBuildTimeout: 30 * time.Minute,
		EnvMaxLayer:     4 << 30,
		EnvReadyTimeout: 60 * time.Second,

		SnapshotMaxBytes:  4 << 30,
		SnapshotMaxCount:  32,
		SnapshotTTL:       7 * 24 * time.Hour,
		PausedInMemoryTTL: 15 * time.Minute,
		ParkOnShutdown:    true,

		ToolsMaxCalls:  50,
		ToolsMaxResult: 256 << 10,
		ToolsTimeout:   30 * time.Second,

		GatewayMaxCalls: 1000,
	}
}

// The isolation backends.
const (
	IsolationNative = "native"
	IsolationGVisor = "gvisor"
)

// GVisorInUse reports whether runs may use the gVisor backend: it is the
// default, or requests may ask for it (use_container).
func (c Config) GVisorInUse() bool {
	return c.Isolation == IsolationGVisor || c.EnableContainerMode
}

// SnapshotPlace resolves SnapshotStore: the directory or the PostgreSQL
// URL snapshots are kept in (one of the two is set), and the file a
// directory store keeps its generated secret in.
func (c Config) SnapshotPlace() (dir, dsn, secretFile string) {
	secretFile = c.StateDir + "/snapshot-secret"
	switch {
	case isPostgresURL(c.SnapshotStore):
		return "", c.SnapshotStore, secretFile
	case c.SnapshotStore != "":
		return c.SnapshotStore, "", secretFile
	case isPostgresURL(c.AuditDB):
		return "", c.AuditDB, secretFile
	}
	return c.StateDir + "/snapshots", "", secretFile
}

func isPostgresURL(v string) bool {
	l := strings.ToLower(v)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// defaultStateDir is $XDG_STATE_HOME/codecage, else ~/.local/state/codecage,
// else a directory under the system's temporary directory.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); strings.HasPrefix(d, "/") {
		return d + "/codecage"
	}
	if home, err := os.UserHomeDir(); err == nil && strings.HasPrefix(home, "/") {
		return home + "/.local/state/codecage"
	}
	return os.TempDir() + "/codecage-state"
}

// readySandboxes counts the sandboxes the pools and spare sessions keep
// ready on the backends in use, and names the settings that add up to it.
func (c Config) readySandboxes() (int, []string) {
	n, names := 0, []string{}
	add := func(name string, v int) {
		if v > 0 {
			n += v
			names = append(names, name)
		}
	}
	if c.Isolation != IsolationGVisor {
		add("SANDBOX_POOL_SIZE", c.PoolSize)
		if c.EnableDataScience {
			add("SANDBOX_DATA_SCIENCE_POOL_SIZE", c.DataPoolSize)
		}
		if c.MaxSessions > 0 {
			add("SANDBOX_SESSION_POOL_SIZE", c.SessionPoolSize)
			if c.MachineSessions {
				add("SANDBOX_MACHINE_POOL_SIZE", c.MachinePoolSize)
			}
		}
	}
	if c.GVisorInUse() {
		add("SANDBOX_GVISOR_POOL_SIZE", c.GVisorPoolSize)
		if c.EnableDataScience {
			add("SANDBOX_GVISOR_DATA_SCIENCE_POOL_SIZE", c.GVisorDataPoolSize)
		}
		if c.MaxSessions > 0 {
			add("SANDBOX_GVISOR_SESSION_POOL_SIZE", c.GVisorSessionPoolSize)
		}
	}
	return n, names
}
