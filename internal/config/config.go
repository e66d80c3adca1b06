// Package config is the operator's configuration: one struct, the table of
// settings (each named once for the JSON file, the environment and the
// flags) and the one loader, Load. Nothing else reads SANDBOX_* variables
// (TestOnlyTheLoaderReadsSandboxVariables). What a request may do is
// decided in internal/policy, from the parts of Config it is handed.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
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
//  3. add one entry to settings below (key, SANDBOX_ variable, usage,
//     and the typed helper that parses and checks it): that makes the
//     JSON key, the variable and the --flag, and lists it in -h;
//  4. check it against other settings in validate, if it must be;
//  5. add a row to README.md's configuration table;
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
	// EnableContainerMode allows use_container (the gVisor backend).
	EnableContainerMode bool
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

	// MaxSessions bounds the sessions open at once.
	MaxSessions int
	// SessionPoolSize and GVisorSessionPoolSize are the sessions started
	// ahead of create_session (default profiles and memory), natively and
	// under gVisor (when it is in use).
	SessionPoolSize, GVisorSessionPoolSize int
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
	Listen        string // REST, MCP and metrics; beyond loopback only with API keys
	E2BListen     string // the E2B SDKs' API too, when set
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

	// PackagesDir holds the operator's package layer (codecage packages
	// install), read-only in every sandbox.
	PackagesDir string
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

		MaxSessions:           16,
		SessionPoolSize:       1,
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

		ToolsMaxCalls:  50,
		ToolsMaxResult: 256 << 10,
		ToolsTimeout:   30 * time.Second,
	}
}

// setting is one configuration value, named the same way in every source:
// Key in the JSON file, Env in the environment, Key with dashes as a flag.
type setting struct {
	Key   string
	Env   string
	Usage string
	get   func(*Config) string
	set   func(*Config, string) error
}

// Settings lists every setting, for flags, documentation and errors.
var settings = []setting{
	durationSetting("timeout", "SANDBOX_TIMEOUT", "default wall-clock limit of a run, seconds", func(c *Config) *time.Duration { return &c.Timeout }),
	durationSetting("max_timeout", "SANDBOX_MAX_TIMEOUT", "largest timeout a request may ask for, seconds", func(c *Config) *time.Duration { return &c.MaxTimeout }),
	durationSetting("cpu_time", "SANDBOX_CPU_TIME", "default CPU-time limit, seconds", func(c *Config) *time.Duration { return &c.CPUTime }),
	durationSetting("max_cpu_time", "SANDBOX_MAX_CPU_TIME", "largest CPU-time limit a request may ask for, seconds", func(c *Config) *time.Duration { return &c.MaxCPUTime }),
	coresSetting("cpu_limit", "SANDBOX_CPU_LIMIT", "CPU bandwidth of every sandbox, in cores (e.g. 0.5, 2)", func(c *Config) *float64 { return &c.CPULimit }),
	coresSetting("session_idle_cpu", "SANDBOX_SESSION_IDLE_CPU", "CPU bandwidth of a session while no request runs in it, in cores", func(c *Config) *float64 { return &c.IdleCPU }),
	sizeSetting("default_memory_limit", "SANDBOX_DEFAULT_MEMORY_LIMIT", "default memory limit (e.g. 128m)", func(c *Config) *int64 { return &c.MemoryLimit }),
	sizeSetting("data_science_memory_limit", "SANDBOX_DATA_SCIENCE_MEMORY_LIMIT", "default memory limit of data_science runs", func(c *Config) *int64 { return &c.DataMemory }),
	sizeSetting("max_memory_limit", "SANDBOX_MAX_MEMORY_LIMIT", "largest memory limit a request may ask for", func(c *Config) *int64 { return &c.MaxMemory }),
	sizeSetting("max_output_size", "SANDBOX_MAX_OUTPUT_SIZE", "default cap on stdout and stderr, each", func(c *Config) *int64 { return &c.OutputSize }),
	sizeSetting("max_output_limit", "SANDBOX_MAX_OUTPUT_LIMIT", "largest output cap a request may ask for", func(c *Config) *int64 { return &c.MaxOutput }),
	intSetting("max_processes", "SANDBOX_MAX_PROCESSES", "processes a run may have at once", func(c *Config) *int { return &c.MaxProcesses }),
	sizeSetting("max_file_size", "SANDBOX_MAX_FILE_SIZE", "largest file a run may write", func(c *Config) *int64 { return &c.MaxFileSize }),
	intSetting("max_open_files", "SANDBOX_MAX_OPEN_FILES", "open files per process", func(c *Config) *int { return &c.MaxOpenFiles }),
	sizeSetting("tmp_size", "SANDBOX_TMP_SIZE", "size of /tmp and /dev/shm, each", func(c *Config) *int64 { return &c.TmpSize }),
	sizeSetting("workspace_size", "SANDBOX_WORKSPACE_SIZE", "size of a run's workspace", func(c *Config) *int64 { return &c.WorkspaceMax }),
	sizeSetting("max_code_size", "SANDBOX_MAX_CODE_SIZE", "largest code a request may send", func(c *Config) *int64 { return &c.MaxCodeSize }),
	boolSetting("enable_data_science", "SANDBOX_ENABLE_DATA_SCIENCE", "enable the data_science profile", func(c *Config) *bool { return &c.EnableDataScience }),
	boolSetting("enable_network", "SANDBOX_ENABLE_NETWORK", "enable the network profile (egress through the proxy only)", func(c *Config) *bool { return &c.EnableNetwork }),
	boolSetting("enable_filesystem", "SANDBOX_ENABLE_FILESYSTEM", "enable the filesystem profile", func(c *Config) *bool { return &c.EnableFilesystem }),
	boolSetting("enable_container_mode", "SANDBOX_ENABLE_CONTAINER_MODE", "allow use_container (gVisor backend)", func(c *Config) *bool { return &c.EnableContainerMode }),
	choiceSetting("isolation", "SANDBOX_ISOLATION", "backend of every run: native (the jail) or gvisor (runsc)", []string{IsolationNative, IsolationGVisor}, func(c *Config) *string { return &c.Isolation }),
	pathSetting("runsc", "SANDBOX_RUNSC", "gVisor's runsc binary (default: /usr/local/lib/codecage/runsc, which scripts/setup.sh builds, else runsc on PATH)", func(c *Config) *string { return &c.Runsc }),
	choiceSetting("gvisor_platform", "SANDBOX_GVISOR_PLATFORM", "gVisor platform: auto (systrap where runsc has it, else ptrace), systrap, ptrace or kvm", []string{"auto", "systrap", "ptrace", "kvm"}, func(c *Config) *string { return &c.GVisorPlatform }),
	countSetting("gvisor_pool_size", "SANDBOX_GVISOR_POOL_SIZE", "basic gVisor sandboxes kept ready when the gVisor backend is in use", func(c *Config) *int { return &c.GVisorPoolSize }),
	countSetting("gvisor_data_science_pool_size", "SANDBOX_GVISOR_DATA_SCIENCE_POOL_SIZE", "data_science gVisor sandboxes kept ready, numpy and pandas loaded", func(c *Config) *int { return &c.GVisorDataPoolSize }),
	listSetting("allowed_imports", "SANDBOX_ALLOWED_IMPORTS", "override every profile's modules (comma-separated; * = policy off)", func(c *Config) *[]string { return &c.AllowedImports }),
	listSetting("default_profiles", "SANDBOX_DEFAULT_PROFILES", "profiles of a request that names none (default: every enabled profile)", func(c *Config) *[]string { return &c.DefaultProfiles }),
	listSetting("network_allow", "SANDBOX_NETWORK_ALLOW", "hosts the network profile may reach (names, *.suffix, ip, host:port)", func(c *Config) *[]string { return &c.NetworkAllow }),
	countSetting("pool_size", "SANDBOX_POOL_SIZE", "basic sandboxes kept ready (0: none)", func(c *Config) *int { return &c.PoolSize }),
	countSetting("data_science_pool_size", "SANDBOX_DATA_SCIENCE_POOL_SIZE", "data_science sandboxes kept ready, numpy and pandas loaded", func(c *Config) *int { return &c.DataPoolSize }),
	intSetting("max_sandboxes", "SANDBOX_MAX_SANDBOXES", "sandboxes that may exist at once", func(c *Config) *int { return &c.MaxSandboxes }),
	durationSetting("queue_timeout", "SANDBOX_QUEUE_TIMEOUT", "longest wait for a sandbox when all are busy, seconds", func(c *Config) *time.Duration { return &c.QueueTimeout }),
	boolSetting("zygote", "SANDBOX_ZYGOTE", "fork pooled sandboxes from a loaded interpreter (needs cgroups)", func(c *Config) *bool { return &c.Zygote }),
	durationSetting("pool_max_idle", "SANDBOX_POOL_MAX_IDLE", "how long a ready sandbox waits before it is replaced, seconds", func(c *Config) *time.Duration { return &c.PoolMaxIdle }),
	intSetting("max_sessions", "SANDBOX_MAX_SESSIONS", "sessions open at once", func(c *Config) *int { return &c.MaxSessions }),
	countSetting("session_pool_size", "SANDBOX_SESSION_POOL_SIZE", "sessions started ahead of create_session (default profiles and memory)", func(c *Config) *int { return &c.SessionPoolSize }),
	countSetting("gvisor_session_pool_size", "SANDBOX_GVISOR_SESSION_POOL_SIZE", "gVisor sessions started ahead of create_session, when the gVisor backend is in use", func(c *Config) *int { return &c.GVisorSessionPoolSize }),
	durationSetting("session_idle_ttl", "SANDBOX_SESSION_IDLE_TTL", "close a session idle this long, seconds", func(c *Config) *time.Duration { return &c.SessionIdleTTL }),
	durationSetting("session_max_lifetime", "SANDBOX_SESSION_MAX_LIFETIME", "close a session this old, seconds", func(c *Config) *time.Duration { return &c.SessionMaxLifetime }),
	{Key: "state_dir", Env: "SANDBOX_STATE_DIR", Usage: "directory for session workspaces and the audit log",
		get: func(c *Config) string { return c.StateDir },
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "/") {
				return errors.New("must be an absolute path")
			}
			c.StateDir = v
			return nil
		}},
	{Key: "rate_limit", Env: "SANDBOX_RATE_LIMIT", Usage: "requests per second per API key (0: no limit; auto: 20 with API keys, none without)",
		get: func(c *Config) string {
			if c.RateLimit == RateAuto {
				return "auto"
			}
			return strconv.FormatFloat(c.RateLimit, 'f', -1, 64)
		},
		set: func(c *Config, v string) error {
			if strings.EqualFold(strings.TrimSpace(v), "auto") {
				c.RateLimit = RateAuto
				return nil
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f < 0 || f > 1e6 {
				return errors.New("want auto or a number from 0 to 1000000")
			}
			c.RateLimit = f
			return nil
		}},
	intSetting("rate_burst", "SANDBOX_RATE_BURST", "requests an API key may make at once before the rate applies", func(c *Config) *int { return &c.RateBurst }),
	intSetting("key_concurrency", "SANDBOX_KEY_CONCURRENCY", "requests running at once per API key, beyond which a key's request is refused (429); without API keys it does not apply", func(c *Config) *int { return &c.KeyConcurrency }),
	intSetting("max_concurrent", "SANDBOX_MAX_CONCURRENT", "requests running at once in all", func(c *Config) *int { return &c.MaxConcurrent }),
	countSetting("queue_size", "SANDBOX_QUEUE_SIZE", "requests that may wait for a free slot (then: busy)", func(c *Config) *int { return &c.QueueSize }),
	intSetting("max_transfers", "SANDBOX_MAX_TRANSFERS", "file downloads and uploads in progress at once (then: busy)", func(c *Config) *int { return &c.MaxTransfers }),
	stringSetting("listen", "SANDBOX_LISTEN", "address serve listens on (beyond loopback only with API keys)", func(c *Config) *string { return &c.Listen }),
	stringSetting("e2b_listen", "SANDBOX_E2B_LISTEN", "serve the E2B SDKs' API (set E2B_API_URL and E2B_SANDBOX_URL to it) on this address too; off when empty", func(c *Config) *string { return &c.E2BListen }),
	{Key: "api_keys", Env: "SANDBOX_API_KEYS", Usage: "API keys, name:key,name2:key2 (Authorization: Bearer key)",
		get: func(c *Config) string {
			if c.APIKeys != "" {
				return "(set)"
			}
			return ""
		},
		set: func(c *Config, v string) error { c.APIKeys = v; return nil }},
	pathSetting("api_keys_file", "SANDBOX_API_KEYS_FILE", "file of API keys, one name:key per line", func(c *Config) *string { return &c.APIKeysFile }),
	sizeSetting("max_body_size", "SANDBOX_MAX_BODY_SIZE", "largest HTTP request body", func(c *Config) *int64 { return &c.MaxBodySize }),
	durationSetting("read_timeout", "SANDBOX_READ_TIMEOUT", "time to read an HTTP request, seconds", func(c *Config) *time.Duration { return &c.ReadTimeout }),
	durationSetting("write_timeout", "SANDBOX_WRITE_TIMEOUT", "time to answer a non-streaming HTTP request, seconds", func(c *Config) *time.Duration { return &c.WriteTimeout }),
	durationSetting("idle_timeout", "SANDBOX_IDLE_TIMEOUT", "time an idle keep-alive HTTP connection is kept, seconds", func(c *Config) *time.Duration { return &c.IdleTimeout }),
	intSetting("max_connections", "SANDBOX_MAX_CONNECTIONS", "open connections per listener (REST and MCP, E2B), within half the open-file limit; more are closed at once", func(c *Config) *int { return &c.MaxConnections }),
	intSetting("max_connections_per_client", "SANDBOX_MAX_CONNECTIONS_PER_CLIENT", "open connections per listener from one client address", func(c *Config) *int { return &c.MaxConnectionsPerClient }),
	durationSetting("stream_write_timeout", "SANDBOX_STREAM_WRITE_TIMEOUT", "time one write of a stream may take before its client is dropped, seconds", func(c *Config) *time.Duration { return &c.StreamWriteTimeout }),
	durationSetting("shutdown_grace", "SANDBOX_SHUTDOWN_GRACE", "on SIGTERM, how long running executions may finish, seconds", func(c *Config) *time.Duration { return &c.ShutdownGrace }),
	dbSetting("audit_db", "SANDBOX_AUDIT_DB", "audit log: an SQLite file (default $XDG_STATE_HOME/codecage/audit.db) or a postgres:// URL shared by replicas", func(c *Config) *string { return &c.AuditDB }),
	boolSetting("audit_code", "SANDBOX_AUDIT_CODE", "store executed code in the audit log (its hash always is)", func(c *Config) *bool { return &c.AuditCode }),
	intSetting("audit_buffer", "SANDBOX_AUDIT_BUFFER", "audit events buffered before they are dropped (and counted)", func(c *Config) *int { return &c.AuditBuffer }),
	stringSetting("replica_url", "SANDBOX_REPLICA_URL", "this replica's base URL for the other replicas (http://POD_IP:8001); set, the server joins the cluster registered in the postgres:// SANDBOX_AUDIT_DB", func(c *Config) *string { return &c.ReplicaURL }),
	stringSetting("replica_name", "SANDBOX_REPLICA_NAME", "this replica's name in messages and the registry (default: the host name)", func(c *Config) *string { return &c.ReplicaName }),
	{Key: "peer_secret", Env: "SANDBOX_PEER_SECRET", Usage: "secret the replicas of a cluster share to authenticate each other (16+ characters)",
		get: func(c *Config) string {
			if c.PeerSecret != "" {
				return "(set)"
			}
			return ""
		},
		set: func(c *Config, v string) error { c.PeerSecret = v; return nil }},
	choiceSetting("log_format", "SANDBOX_LOG_FORMAT", "log format: text or json", []string{"text", "json"}, func(c *Config) *string { return &c.LogFormat }),
	choiceSetting("log_level", "SANDBOX_LOG_LEVEL", "log level: debug, info, warn or error", []string{"debug", "info", "warn", "error"}, func(c *Config) *string { return &c.LogLevel }),
	listSetting("allowed_commands", "SANDBOX_ALLOWED_COMMANDS", "programs run_command may run (the kernel refuses the rest)", func(c *Config) *[]string { return &c.AllowedCommands }),
	durationSetting("command_timeout", "SANDBOX_COMMAND_TIMEOUT", "default wall-clock limit of a command, seconds", func(c *Config) *time.Duration { return &c.CommandTimeout }),
	durationSetting("max_command_timeout", "SANDBOX_MAX_COMMAND_TIMEOUT", "largest timeout a command may ask for, seconds", func(c *Config) *time.Duration { return &c.MaxCommandTime }),
	listSetting("blocked_packages", "SANDBOX_BLOCKED_PACKAGES", "packages pip_install refuses (default: the built-in list)", func(c *Config) *[]string { return &c.BlockedPackages }),
	{Key: "pip_index_url", Env: "SANDBOX_PIP_INDEX_URL", Usage: "package index pip_install may reach (through the egress proxy)",
		get: func(c *Config) string { return c.PipIndexURL },
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
				return errors.New("want an http(s) URL such as https://pypi.org/simple")
			}
			c.PipIndexURL = strings.TrimSuffix(v, "/")
			return nil
		}},
	pathSetting("pip_find_links", "SANDBOX_PIP_FIND_LINKS", "a local wheelhouse directory; pip_install then needs no network", func(c *Config) *string { return &c.PipFindLinks }),
	sizeSetting("pip_max_download", "SANDBOX_PIP_MAX_DOWNLOAD", "bytes one pip_install may download", func(c *Config) *int64 { return &c.PipMaxDownload }),
	sizeSetting("pip_max_install", "SANDBOX_PIP_MAX_INSTALL", "bytes a session's installed packages may take", func(c *Config) *int64 { return &c.PipMaxInstall }),
	durationSetting("pip_timeout", "SANDBOX_PIP_TIMEOUT", "wall-clock limit of one pip_install, seconds", func(c *Config) *time.Duration { return &c.PipTimeout }),
	pathSetting("tools_config", "SANDBOX_TOOLS_CONFIG", "JSON file of upstream MCP servers whose tools code may call (code mode)", func(c *Config) *string { return &c.ToolsConfig }),
	intSetting("tools_max_calls", "SANDBOX_TOOLS_MAX_CALLS", "upstream tool calls one execution may make", func(c *Config) *int { return &c.ToolsMaxCalls }),
	sizeSetting("tools_max_result", "SANDBOX_TOOLS_MAX_RESULT", "largest upstream tool result handed to code", func(c *Config) *int64 { return &c.ToolsMaxResult }),
	durationSetting("tools_timeout", "SANDBOX_TOOLS_TIMEOUT", "time limit of one upstream tool call, seconds", func(c *Config) *time.Duration { return &c.ToolsTimeout }),
	pathSetting("packages_dir", "SANDBOX_PACKAGES_DIR", "the operator's package layer (codecage packages install), read-only in sandboxes", func(c *Config) *string { return &c.PackagesDir }),
	{Key: "python", Env: "SANDBOX_PYTHON", Usage: "Python interpreter inside the jail",
		get: func(c *Config) string { return c.Interpreter },
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "/") {
				return errors.New("must be an absolute path")
			}
			c.Interpreter = v
			return nil
		}},
}

// SettingKeys lists the setting keys with their environment variables and
// usage, for help output.
func SettingKeys() [][3]string {
	out := make([][3]string, len(settings))
	for i, s := range settings {
		out[i] = [3]string{s.Key, s.Env, s.Usage}
	}
	return out
}

// ConfigError is a bad value in one source of configuration.
type ConfigError struct {
	Source string // e.g. "SANDBOX_TIMEOUT", "--timeout", "codecage.json: timeout"
	Value  string
	Err    error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s=%q: %v", e.Source, e.Value, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigFileEnv names the JSON file when --config does not.
const ConfigFileEnv = "SANDBOX_CONFIG"

// Load builds the configuration: defaults, then the JSON file (path, else
// $SANDBOX_CONFIG, if either is set), then the environment (getenv), then
// flags (key -> value). Every value is validated; the first bad one is
// returned as a *ConfigError.
func Load(path string, getenv func(string) string, flags map[string]string) (Config, error) {
	c := DefaultConfig()
	if path == "" {
		path = getenv(ConfigFileEnv)
	}
	if path != "" {
		if err := c.loadFile(path); err != nil {
			return c, err
		}
	}
	for _, s := range settings {
		if v := getenv(s.Env); v != "" {
			if err := s.set(&c, v); err != nil {
				return c, &ConfigError{s.Env, v, err}
			}
		}
	}
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := lookupSetting(k)
		if !ok {
			return c, &ConfigError{"--" + k, flags[k], errors.New("unknown setting")}
		}
		if err := s.set(&c, flags[k]); err != nil {
			return c, &ConfigError{"--" + strings.ReplaceAll(k, "_", "-"), flags[k], err}
		}
	}
	return c, c.validate()
}

// EnvValue is one setting's value from the environment alone ("" when
// unset), validated as Load would: for a command that needs that one
// setting and not the whole configuration (codecage audit's database).
func EnvValue(key string, getenv func(string) string) (string, error) {
	s, ok := lookupSetting(key)
	if !ok {
		return "", fmt.Errorf("unknown setting %q", key)
	}
	v := getenv(s.Env)
	if v == "" {
		return "", nil
	}
	c := DefaultConfig()
	if err := s.set(&c, v); err != nil {
		return "", &ConfigError{s.Env, v, err}
	}
	return v, nil
}

func lookupSetting(key string) (setting, bool) {
	key = strings.ReplaceAll(key, "-", "_")
	for _, s := range settings {
		if s.Key == key {
			return s, true
		}
	}
	return setting{}, false
}

func (c *Config) loadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := lookupSetting(k)
		if !ok {
			return &ConfigError{path + ": " + k, string(raw[k]), errors.New("unknown setting")}
		}
		v := string(raw[k])
		var str string
		if json.Unmarshal(raw[k], &str) == nil {
			v = str // strings are taken as written; numbers and bools as JSON text
		} else {
			var list []string
			if json.Unmarshal(raw[k], &list) == nil {
				v = strings.Join(list, ",")
			}
		}
		if err := s.set(c, v); err != nil {
			return &ConfigError{path + ": " + k, v, err}
		}
	}
	return nil
}

// validate checks the values against each other.
func (c *Config) validate() error {
	pairs := []struct {
		name      string
		def, max  int64
		defEnv    string
		maxEnvVar string
	}{
		{"timeout", int64(c.Timeout), int64(c.MaxTimeout), "SANDBOX_TIMEOUT", "SANDBOX_MAX_TIMEOUT"},
		{"cpu_time", int64(c.CPUTime), int64(c.MaxCPUTime), "SANDBOX_CPU_TIME", "SANDBOX_MAX_CPU_TIME"},
		{"memory", c.MemoryLimit, c.MaxMemory, "SANDBOX_DEFAULT_MEMORY_LIMIT", "SANDBOX_MAX_MEMORY_LIMIT"},
		{"data_science memory", c.DataMemory, c.MaxMemory, "SANDBOX_DATA_SCIENCE_MEMORY_LIMIT", "SANDBOX_MAX_MEMORY_LIMIT"},
		{"output", c.OutputSize, c.MaxOutput, "SANDBOX_MAX_OUTPUT_SIZE", "SANDBOX_MAX_OUTPUT_LIMIT"},
	}
	for _, p := range pairs {
		if p.def > p.max {
			return fmt.Errorf("%s default (%s) is above its maximum (%s)", p.name, p.defEnv, p.maxEnvVar)
		}
	}
	if c.MemoryLimit < MinMemory || c.DataMemory < MinMemory {
		return fmt.Errorf("memory limits must be at least %d MiB", MinMemory>>20)
	}
	if c.IdleCPU > c.CPULimit {
		return fmt.Errorf("session idle CPU (SANDBOX_SESSION_IDLE_CPU=%g) is above the CPU limit (SANDBOX_CPU_LIMIT=%g)", c.IdleCPU, c.CPULimit)
	}
	if c.CommandTimeout > c.MaxCommandTime {
		return errors.New("command timeout default (SANDBOX_COMMAND_TIMEOUT) is above its maximum (SANDBOX_MAX_COMMAND_TIMEOUT)")
	}
	if n, names := c.readySandboxes(); n > c.MaxSandboxes {
		return fmt.Errorf("the sandboxes kept ready (%s: %d) exceed SANDBOX_MAX_SANDBOXES (%d), which bounds every sandbox, ready ones included", strings.Join(names, " + "), n, c.MaxSandboxes)
	}
	if c.DefaultProfiles != nil && len(c.DefaultProfiles) == 0 {
		return errors.New("SANDBOX_DEFAULT_PROFILES is empty (want e.g. basic, or leave it unset for every enabled profile)")
	}
	for _, name := range c.DefaultProfiles {
		p, ok := policy.LookupProfile(name)
		if !ok {
			return fmt.Errorf("SANDBOX_DEFAULT_PROFILES: unknown profile %q (known: %s)", name, strings.Join(policy.ProfileNames(), ", "))
		}
		if !c.ProfileEnabled(name) {
			return fmt.Errorf("SANDBOX_DEFAULT_PROFILES names %s, which is not enabled (%s=true)", name, p.Setting)
		}
	}
	return nil
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

// MinMemory is the smallest memory limit a run may have: the interpreter
// alone needs about 10 MiB.
const MinMemory = 16 << 20

func durationSetting(key, env, usage string, field func(*Config) *time.Duration) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.FormatFloat(field(c).Seconds(), 'f', -1, 64) },
		set: func(c *Config, v string) error {
			d, err := ParseSeconds(v)
			if err != nil {
				return err
			}
			*field(c) = d
			return nil
		}}
}

// MaxSeconds bounds every duration setting: a day is longer than any run.
const MaxSeconds = 86400

// ParseSeconds reads a duration in seconds ("30", "1.5", "30s"), above 0
// and at most MaxSeconds. NaN and infinities are refused: converted to a
// time.Duration they would wrap to a negative one.
func ParseSeconds(v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "s"), 64)
	if err != nil || !(f > 0 && f <= MaxSeconds) { // NaN fails too
		return 0, fmt.Errorf("want a number of seconds between 0 and %d", MaxSeconds)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// MinCPUCores and MaxCPUCores bound a CPU bandwidth setting: the kernel
// refuses a quota under 1 ms per 100 ms period, and more than 1024 cores
// is a typo, not a machine.
const (
	MinCPUCores = 0.01
	MaxCPUCores = 1024
)

// coresSetting reads a CPU bandwidth in cores (a fraction is a share of one).
func coresSetting(key, env, usage string, field func(*Config) *float64) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.FormatFloat(*field(c), 'f', -1, 64) },
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || !(f >= MinCPUCores && f <= MaxCPUCores) { // NaN fails too
				return fmt.Errorf("want a number of cores from %g to %d", MinCPUCores, MaxCPUCores)
			}
			*field(c) = f
			return nil
		}}
}

func pathSetting(key, env, usage string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "/") {
				return errors.New("must be an absolute path")
			}
			*field(c) = v
			return nil
		}}
}

func stringSetting(key, env, usage string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, v string) error { *field(c) = strings.TrimSpace(v); return nil }}
}

// dbSetting takes an absolute path or a PostgreSQL URL.
func dbSetting(key, env, usage string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return redactURL(*field(c)) },
		set: func(c *Config, v string) error {
			l := strings.ToLower(v)
			if !strings.HasPrefix(v, "/") && !strings.HasPrefix(l, "postgres://") && !strings.HasPrefix(l, "postgresql://") {
				return errors.New("must be an absolute path or a postgres:// URL")
			}
			*field(c) = v
			return nil
		}}
}

// redactURL hides the password of a URL, for display.
func redactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return v
	}
	if _, ok := u.User.Password(); !ok {
		return v
	}
	return u.Redacted()
}

func choiceSetting(key, env, usage string, choices []string, field func(*Config) *string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, v string) error {
			v = strings.ToLower(strings.TrimSpace(v))
			if !slices.Contains(choices, v) {
				return fmt.Errorf("want one of %s", strings.Join(choices, ", "))
			}
			*field(c) = v
			return nil
		}}
}

func sizeSetting(key, env, usage string, field func(*Config) *int64) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.FormatInt(*field(c), 10) },
		set: func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err != nil {
				return err
			}
			*field(c) = n
			return nil
		}}
}

func intSetting(key, env, usage string, field func(*Config) *int) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n <= 0 || n > 1<<20 {
				return errors.New("want a positive whole number")
			}
			*field(c) = n
			return nil
		}}
}

// countSetting is like intSetting but allows zero.
func countSetting(key, env, usage string, field func(*Config) *int) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 || n > 1024 {
				return errors.New("want a whole number from 0 to 1024")
			}
			*field(c) = n
			return nil
		}}
}

func boolSetting(key, env, usage string, field func(*Config) *bool) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strconv.FormatBool(*field(c)) },
		set: func(c *Config, v string) error {
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "1", "true", "yes", "on":
				*field(c) = true
			case "0", "false", "no", "off":
				*field(c) = false
			default:
				return errors.New("want true or false")
			}
			return nil
		}}
}

func listSetting(key, env, usage string, field func(*Config) *[]string) setting {
	return setting{Key: key, Env: env, Usage: usage,
		get: func(c *Config) string { return strings.Join(*field(c), ",") },
		set: func(c *Config, v string) error {
			list := []string{}
			for _, item := range strings.Split(v, ",") {
				if item = strings.TrimSpace(item); item != "" && !slices.Contains(list, item) {
					list = append(list, item)
				}
			}
			*field(c) = list
			return nil
		}}
}

// MaxSize bounds every size setting (1 PiB): far above any machine, far
// below where int64 arithmetic on it could overflow.
const MaxSize = 1 << 50

// ParseSize reads a byte size: "1048576", "512k", "128m", "4g" (binary units).
func ParseSize(v string) (int64, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "b"), "i")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k':
			mult, s = 1<<10, s[:n-1]
		case 'm':
			mult, s = 1<<20, s[:n-1]
		case 'g':
			mult, s = 1<<30, s[:n-1]
		case 't':
			mult, s = 1<<40, s[:n-1]
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || !(n > 0 && n*float64(mult) <= MaxSize) { // NaN fails too
		return 0, errors.New("want a positive size such as 1048576, 512k, 128m or 4g")
	}
	return int64(n * float64(mult)), nil
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
