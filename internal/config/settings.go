package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// setting is one configuration value, named the same way in every source:
// Key in the JSON file, Env in the environment, Key with dashes as a flag.
type setting struct {
	Key   string
	Env   string
	Usage string // the one line -h prints
	// Doc is the meaning docs/configuration.md gives, where Usage says too
	// little; empty: Usage.
	Doc string
	// Default is the default as docs/configuration.md words it, where the
	// value alone would mislead (one computed at start, or an empty one
	// that means something); empty: DefaultConfig's value.
	Default string
	kind    settingKind // how the page writes DefaultConfig's value
	get     func(*Config) string
	set     func(*Config, string) error
}

// settingKind tells the configuration page how to write a default.
type settingKind int

const (
	kindPlain        settingKind = iota // as get prints it
	kindSize                            // bytes, written with a unit (128m)
	kindLongDuration                    // seconds, written with a unit (7d)
)

// doc sets the page's text of a setting made by a helper of kinds.go.
func (s setting) doc(text string) setting { s.Doc = text; return s }

// shown sets the page's wording of a setting's default.
func (s setting) shown(text string) setting { s.Default = text; return s }

// docs/configuration.md's reference is made from this table (reference.go);
// TestConfigurationPageIsCurrent fails when the committed page differs.
//go:generate go run gendocs.go

// Settings lists every setting, for flags, documentation and errors.
var settings = []setting{
	durationSetting("timeout", "SANDBOX_TIMEOUT", "default wall-clock limit of a run, seconds", func(c *Config) *time.Duration { return &c.Timeout }),
	durationSetting("max_timeout", "SANDBOX_MAX_TIMEOUT", "largest timeout a request may ask for, seconds", func(c *Config) *time.Duration { return &c.MaxTimeout }),
	durationSetting("cpu_time", "SANDBOX_CPU_TIME", "default CPU-time limit, seconds", func(c *Config) *time.Duration { return &c.CPUTime }).
		doc("default CPU-time limit, seconds; a run whose timeout is longer gets its timeout instead, up to `SANDBOX_MAX_CPU_TIME`"),
	durationSetting("max_cpu_time", "SANDBOX_MAX_CPU_TIME", "largest CPU-time limit a request may ask for, seconds", func(c *Config) *time.Duration { return &c.MaxCPUTime }),
	coresSetting("cpu_limit", "SANDBOX_CPU_LIMIT", "CPU bandwidth of every sandbox, in cores (e.g. 0.5, 2)", func(c *Config) *float64 { return &c.CPULimit }).
		doc("CPU bandwidth of every sandbox, in cores (0.01 to 1024; the cgroup `cpu` controller's quota): threads beyond it are throttled, not killed"),
	coresSetting("session_idle_cpu", "SANDBOX_SESSION_IDLE_CPU", "CPU bandwidth of a session while no request runs in it, in cores", func(c *Config) *float64 { return &c.IdleCPU }).
		doc("CPU bandwidth of a session while no request runs in it, in cores (at most `SANDBOX_CPU_LIMIT`); what it spent between requests is `resources.idle_cpu_seconds` of its next result"),
	sizeSetting("default_memory_limit", "SANDBOX_DEFAULT_MEMORY_LIMIT", "default memory limit (e.g. 128m)", func(c *Config) *int64 { return &c.MemoryLimit }),
	sizeSetting("data_science_memory_limit", "SANDBOX_DATA_SCIENCE_MEMORY_LIMIT", "default memory limit of data_science runs", func(c *Config) *int64 { return &c.DataMemory }),
	sizeSetting("max_memory_limit", "SANDBOX_MAX_MEMORY_LIMIT", "largest memory limit a request may ask for", func(c *Config) *int64 { return &c.MaxMemory }),
	sizeSetting("max_output_size", "SANDBOX_MAX_OUTPUT_SIZE", "default cap on stdout and stderr, each", func(c *Config) *int64 { return &c.OutputSize }).
		doc("default cap on stdout and stderr, each; past it the run is stopped and marked truncated"),
	sizeSetting("max_output_limit", "SANDBOX_MAX_OUTPUT_LIMIT", "largest output cap a request may ask for", func(c *Config) *int64 { return &c.MaxOutput }),
	intSetting("max_processes", "SANDBOX_MAX_PROCESSES", "processes a run may have at once", func(c *Config) *int { return &c.MaxProcesses }),
	sizeSetting("max_file_size", "SANDBOX_MAX_FILE_SIZE", "largest file a run may write", func(c *Config) *int64 { return &c.MaxFileSize }),
	intSetting("max_open_files", "SANDBOX_MAX_OPEN_FILES", "open files per process", func(c *Config) *int { return &c.MaxOpenFiles }),
	sizeSetting("tmp_size", "SANDBOX_TMP_SIZE", "size of /tmp and /dev/shm, each", func(c *Config) *int64 { return &c.TmpSize }),
	sizeSetting("workspace_size", "SANDBOX_WORKSPACE_SIZE", "size of a run's workspace", func(c *Config) *int64 { return &c.WorkspaceMax }),
	sizeSetting("max_code_size", "SANDBOX_MAX_CODE_SIZE", "largest code a request may send", func(c *Config) *int64 { return &c.MaxCodeSize }).
		doc("largest code a request may send (`codecage run` refuses a larger input, exit 2); the audit log cuts stored code at this size"),
	boolSetting("enable_data_science", "SANDBOX_ENABLE_DATA_SCIENCE", "enable the data_science profile", func(c *Config) *bool { return &c.EnableDataScience }).
		doc("enable the data_science profile (numpy, pandas, scipy, matplotlib, sympy, sklearn; 1 GiB default memory)"),
	boolSetting("enable_network", "SANDBOX_ENABLE_NETWORK", "enable the network profile (egress through the proxy only)", func(c *Config) *bool { return &c.EnableNetwork }).
		doc("enable the network profile: egress through the proxy only, to `SANDBOX_NETWORK_ALLOW`"),
	boolSetting("enable_filesystem", "SANDBOX_ENABLE_FILESYSTEM", "enable the filesystem profile", func(c *Config) *bool { return &c.EnableFilesystem }).
		doc("enable the filesystem profile (os, pathlib, tempfile, shutil, ...)"),
	boolSetting("enable_container_mode", "SANDBOX_ENABLE_CONTAINER_MODE", "allow use_container (gVisor backend)", func(c *Config) *bool { return &c.EnableContainerMode }).
		doc("let requests ask for the gVisor backend (`use_container: true`)"),
	boolSetting("require_user_namespace", "SANDBOX_REQUIRE_USER_NAMESPACE", "refuse to start unless this process runs in a user namespace of its own (the Helm chart sets it for hostUsers: false)", func(c *Config) *bool { return &c.RequireUserNamespace }).
		doc("refuse to start (`serve`, `mcp`; `doctor` fails) when this process runs on the host's own user ids: set it where the server was promised a user namespace of its own, as the Helm chart does for `hostUsers: false`, because a runtime too old for one (containerd before 2.0) ignores the request silently and the container's root is then the host's"),
	choiceSetting("isolation", "SANDBOX_ISOLATION", "backend of every run: native (the jail) or gvisor (runsc)", []string{IsolationNative, IsolationGVisor}, func(c *Config) *string { return &c.Isolation }),
	pathSetting("runsc", "SANDBOX_RUNSC", "gVisor's runsc binary (default: /usr/local/lib/codecage/runsc, which scripts/setup.sh builds, else runsc on PATH)", func(c *Config) *string { return &c.Runsc }).
		doc("gVisor's runsc binary").
		shown("`/usr/local/lib/codecage/runsc` (which `scripts/setup.sh` builds), else runsc on `PATH`"),
	choiceSetting("gvisor_platform", "SANDBOX_GVISOR_PLATFORM", "gVisor platform: auto (systrap where runsc has it, else ptrace), systrap, ptrace or kvm", []string{"auto", "systrap", "ptrace", "kvm"}, func(c *Config) *string { return &c.GVisorPlatform }).
		doc("gVisor platform: `auto` (systrap where that runsc has it and a sandbox runs on it, else ptrace), `systrap`, `ptrace` or `kvm` (accepted, never picked by `auto`)"),
	countSetting("gvisor_pool_size", "SANDBOX_GVISOR_POOL_SIZE", "basic gVisor sandboxes kept ready when the gVisor backend is in use", func(c *Config) *int { return &c.GVisorPoolSize }),
	countSetting("gvisor_data_science_pool_size", "SANDBOX_GVISOR_DATA_SCIENCE_POOL_SIZE", "data_science gVisor sandboxes kept ready, numpy and pandas loaded", func(c *Config) *int { return &c.GVisorDataPoolSize }),
	listSetting("allowed_imports", "SANDBOX_ALLOWED_IMPORTS", "override every profile's modules (comma-separated; * = policy off)", func(c *Config) *[]string { return &c.AllowedImports }).
		shown("none (each profile's own list)"),
	listSetting("default_profiles", "SANDBOX_DEFAULT_PROFILES", "profiles of a request that names none (default: every enabled profile)", func(c *Config) *[]string { return &c.DefaultProfiles }).
		shown("every enabled profile"),
	listSetting("network_allow", "SANDBOX_NETWORK_ALLOW", "hosts the network profile may reach (names, *.suffix, ip, host:port)", func(c *Config) *[]string { return &c.NetworkAllow }).
		doc("hosts the network profile may reach: exact names, `*.suffix`, IPs, `host:port`; private, loopback, link-local and metadata addresses (after resolving) only when an exact entry lists them").
		shown("none: nothing"),
	pathSetting("egress_roots", "SANDBOX_EGRESS_ROOTS", "PEM file of extra authorities the egress proxy verifies credentialed HTTPS servers with", func(c *Config) *string { return &c.EgressRoots }).
		doc("a PEM file of certificate authorities the egress proxy trusts, besides the host's, when it opens an HTTPS tunnel to add a credential (a private API's own authority); unset: the host's alone"),
	pathSetting("egress_credentials", "SANDBOX_EGRESS_CREDENTIALS", "JSON file of credentials the egress proxy adds for every sandbox with the network", func(c *Config) *string { return &c.EgressCredentials }).
		doc("a JSON file of the operator's egress credentials, `{\"credentials\": [{\"name\", \"host\", \"header\", \"prefix\", \"value_env\" or \"value_file\", ...}]}`: the egress proxy adds each to the HTTPS requests of every sandbox with the network profile (runs and sessions) to its host; values come from the server's environment or a file, never enter a sandbox, and are never logged ([security](security.md#credentials-added-at-the-egress-proxy))"),
	countSetting("pool_size", "SANDBOX_POOL_SIZE", "basic sandboxes kept ready (0: none)", func(c *Config) *int { return &c.PoolSize }).
		doc("basic sandboxes kept ready, refilled in the background (0: none)"),
	countSetting("data_science_pool_size", "SANDBOX_DATA_SCIENCE_POOL_SIZE", "data_science sandboxes kept ready, numpy and pandas loaded", func(c *Config) *int { return &c.DataPoolSize }),
	intSetting("max_sandboxes", "SANDBOX_MAX_SANDBOXES", "sandboxes that may exist at once", func(c *Config) *int { return &c.MaxSandboxes }).
		doc("sandboxes that may exist at once: one budget over every kind (ready in a pool, running, a session's, a spare session, a command, a `pip_install`, the `validate_code` analyzer), on either backend; a zygote is not counted, each cell it forks is"),
	durationSetting("queue_timeout", "SANDBOX_QUEUE_TIMEOUT", "longest wait for a sandbox when all are busy, seconds", func(c *Config) *time.Duration { return &c.QueueTimeout }).
		doc("longest wait for a sandbox when every slot of `SANDBOX_MAX_SANDBOXES` is held, seconds; then 503 busy with `Retry-After`"),
	boolSetting("zygote", "SANDBOX_ZYGOTE", "fork pooled sandboxes from a loaded interpreter (needs cgroups)", func(c *Config) *bool { return &c.Zygote }).
		doc("fork pooled sandboxes (cells) from a jailed interpreter that has loaded its modules once (needs cgroups; without, the pool keeps whole jails warm)"),
	countSetting("env_pool_size", "SANDBOX_ENV_POOL_SIZE", "sandboxes of an environment kept ready once a run has used it (0: none)", func(c *Config) *int { return &c.EnvPoolSize }).
		doc("sandboxes of an environment kept ready (forked from a zygote of its own Python, its preimports loaded) once a run has used it, within `SANDBOX_MAX_SANDBOXES` (0: each run starts its own)"),
	durationSetting("env_pool_idle", "SANDBOX_ENV_POOL_IDLE", "close an environment's pool and zygote unused this long, seconds", func(c *Config) *time.Duration { return &c.EnvPoolIdle }).
		doc("close an environment's pool and zygote unused this long, seconds (they close too when the environment is removed)"),
	durationSetting("pool_max_idle", "SANDBOX_POOL_MAX_IDLE", "how long a ready sandbox waits before it is replaced, seconds", func(c *Config) *time.Duration { return &c.PoolMaxIdle }),
	intSetting("max_sessions", "SANDBOX_MAX_SESSIONS", "sessions open at once", func(c *Config) *int { return &c.MaxSessions }),
	countSetting("max_watches", "SANDBOX_MAX_WATCHES", "directory watches open at once, server-wide (0: none)", func(c *Config) *int { return &c.MaxWatches }).
		doc("directory watches (E2B's `files.watchDir`) open at once, server-wide (0: none); each is an inotify instance of the server's, and the host allows 128 per user by default"),
	keyShareSetting("key_max_sessions", "SANDBOX_KEY_MAX_SESSIONS", "sessions one API key may have open at once, paused ones and forks included, within SANDBOX_MAX_SESSIONS (auto: half of it with two or more keys; 0: no share; without API keys it does not apply)", func(c *Config) *int { return &c.KeyMaxSessions }).
		doc("one API key's share of `SANDBOX_MAX_SESSIONS` (running and paused sessions, forks included), so that one tenant cannot take them all; the server-wide bound still holds. `auto`: half of it with two or more keys; with one key, or without keys, no share; `0`: no share. A key at its share is refused with `key_limit`, naming the setting (REST 409, MCP `key limit: ...`, E2B 429 without `Retry-After`, envd `resource_exhausted`); a fork whose `count` would take the key past its share is refused whole, before anything is copied. A parked session holds no place until it is brought back, which needs one. Counted per replica, as the server-wide bounds are"),
	keyShareSetting("key_max_watches", "SANDBOX_KEY_MAX_WATCHES", "directory watches one API key may have open at once, within SANDBOX_MAX_WATCHES (auto: half of it with two or more keys; 0: no share; without API keys it does not apply)", func(c *Config) *int { return &c.KeyMaxWatches }).
		doc("one API key's share of `SANDBOX_MAX_WATCHES`, as `SANDBOX_KEY_MAX_SESSIONS` is of the sessions (`auto`: half of it with two or more keys; with one key, or without keys, no share; `0`: no share)"),
	countSetting("session_max_watches", "SANDBOX_SESSION_MAX_WATCHES", "directory watches a session may have open (0: none)", func(c *Config) *int { return &c.SessionMaxWatches }),
	intSetting("watch_max_dirs", "SANDBOX_WATCH_MAX_DIRS", "directories one recursive watch may cover", func(c *Config) *int { return &c.WatchMaxDirs }).
		doc("directories one recursive watch may cover; the watch ends with an error past that"),
	countSetting("session_pool_size", "SANDBOX_SESSION_POOL_SIZE", "sessions started ahead of create_session (default profiles and memory)", func(c *Config) *int { return &c.SessionPoolSize }).
		doc("sessions started ahead of `create_session` (default profiles and memory), replaced once taken"),
	countSetting("machine_pool_size", "SANDBOX_MACHINE_POOL_SIZE", "machine sessions started ahead of create, natively, when machine sessions are on", func(c *Config) *int { return &c.MachinePoolSize }).
		doc("machine sessions started ahead of create, natively, when machine sessions are on (`SANDBOX_MACHINE_SESSIONS`), in the shape asked for most: E2B's sandboxes when `SANDBOX_E2B_LISTEN` is set, else `machine: true` sessions with the default home; replaced once taken"),
	countSetting("gvisor_session_pool_size", "SANDBOX_GVISOR_SESSION_POOL_SIZE", "gVisor sessions started ahead of create_session, when the gVisor backend is in use", func(c *Config) *int { return &c.GVisorSessionPoolSize }),
	durationSetting("session_idle_ttl", "SANDBOX_SESSION_IDLE_TTL", "close a session idle this long, seconds", func(c *Config) *time.Duration { return &c.SessionIdleTTL }),
	durationSetting("session_max_lifetime", "SANDBOX_SESSION_MAX_LIFETIME", "close a session this old, seconds", func(c *Config) *time.Duration { return &c.SessionMaxLifetime }),
	{Key: "state_dir", Env: "SANDBOX_STATE_DIR", Usage: "directory for session workspaces and the audit log",
		Doc: "directory of session workspaces (`sessions/`), and the default place of the snapshot store (`snapshots/`) and its generated secret, of environments (`environments/`) and of the operator's packages (`packages/`)", Default: "`$XDG_STATE_HOME/codecage`, else `~/.local/state/codecage`, else `codecage-state` in the temporary directory",
		get: func(c *Config) string { return c.StateDir },
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "/") {
				return errors.New("must be an absolute path")
			}
			c.StateDir = v
			return nil
		}},
	{Key: "rate_limit", Env: "SANDBOX_RATE_LIMIT", Usage: "requests per second per API key (0: no limit; auto: 20 with API keys, none without)",
		Doc: "token bucket per API key, requests per second (0: off); past it 429 with `Retry-After`. `auto`: 20 per key when the server has API keys, none without (loopback only, one caller: a burst such as an evaluation loop waits in the queue instead of being refused). The startup log line says which",
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
	intSetting("key_concurrency", "SANDBOX_KEY_CONCURRENCY", "requests running at once per API key, beyond which a key's request is refused (429); without API keys it does not apply", func(c *Config) *int { return &c.KeyConcurrency }).
		doc("requests running at once per API key; a key's next one is refused (429, `Retry-After`). Without API keys it does not apply: the one caller's burst queues"),
	intSetting("max_concurrent", "SANDBOX_MAX_CONCURRENT", "requests running at once in all", func(c *Config) *int { return &c.MaxConcurrent }).
		doc("requests running at once in all; more wait in order (`SANDBOX_QUEUE_SIZE`)"),
	countSetting("queue_size", "SANDBOX_QUEUE_SIZE", "requests that may wait for a free slot (then: busy)", func(c *Config) *int { return &c.QueueSize }).
		doc("requests that may wait in order for a free slot, up to `SANDBOX_QUEUE_TIMEOUT`; beyond the queue, or after the wait, 503 busy with `Retry-After`"),
	intSetting("max_transfers", "SANDBOX_MAX_TRANSFERS", "file downloads and uploads in progress at once (then: busy)", func(c *Config) *int { return &c.MaxTransfers }).
		doc("file downloads and uploads in progress at once, on every surface (REST, MCP `read_file`, E2B `/files`), each streaming through a fixed buffer; one more is refused at once as busy (REST 503 with `Retry-After`, E2B 429)"),
	stringSetting("listen", "SANDBOX_LISTEN", "address serve listens on (beyond loopback only with API keys)", func(c *Config) *string { return &c.Listen }).
		doc("address `serve` listens on (REST, MCP, `/metrics`); beyond loopback only with API keys"),
	stringSetting("e2b_listen", "SANDBOX_E2B_LISTEN", "serve the E2B SDKs' API (set E2B_API_URL and E2B_SANDBOX_URL to it) on this address too; off when empty", func(c *Config) *string { return &c.E2BListen }).
		doc("`serve` also serves the E2B SDKs' API on this address (set `E2B_API_URL` and `E2B_SANDBOX_URL` to it)").
		shown("off"),
	stringSetting("e2b_domain", "SANDBOX_E2B_DOMAIN", "the domain of sandbox hosts (getHost gives <port>-<sandbox id>.<domain>; a :port may follow), as clients reach the E2B listener; empty: localhost:<the E2B listener's port>", func(c *Config) *string { return &c.E2BDomain }).
		doc("the domain create announces for sandbox hosts: `getHost(port)` is `<port>-<sandbox id>.<domain>` (a `:port` may follow), which the E2B listener relays to that port of the sandbox; set it to a wildcard name (`*.sbx.example.com` pointing at the listener, or a proxy keeping `Host`) for clients that do not resolve `*.localhost` (node, Python; curl and browsers do)").
		shown("`localhost:<the E2B listener's port>`"),
	boolSetting("machine_sessions", "SANDBOX_MACHINE_SESSIONS", "sessions may be machines (machine: true; every E2B sandbox): their commands run in the session's own process tree, where background processes live on, and run any program of its root; off, every command keeps to SANDBOX_ALLOWED_COMMANDS", func(c *Config) *bool { return &c.MachineSessions }).
		doc("a session created with `machine: true`, and every E2B sandbox, is a machine (natively, or of gVisor's kernel under gVisor): its commands start inside its own sandbox beside its interpreter (one process tree, one cgroup, its limits), a process a command leaves running lives until it exits or the session ends, a command may run any program of the session's root and as long as the session (no timeout: that long), and `python3` is the interpreter's, with the session's packages. The wall is the same: namespaces, seccomp, Landlock, no capability. Off, sessions and E2B sandboxes keep every command in a jail of its own, on `SANDBOX_ALLOWED_COMMANDS`"),
	boolSetting("machine_root", "SANDBOX_MACHINE_ROOT", "a machine session has root inside: uid 0 of its own user namespace on a block of host ids of its own (user: root, sudo, a writable /usr), with no host privilege, natively and under gVisor; off, its processes all run as its user", func(c *Config) *bool { return &c.MachineRoot }).
		doc("a machine session (every E2B sandbox) has root inside, as a computer does, on both backends: its user namespace maps ids 0 to 1023 onto a block of host ids of its own, a command may run as root (`user: root` on REST and MCP, E2B's `user: 'root'`, `sudo`), and `/usr` is root's to write (an overlay over the host's, seen through an idmapped read-only mount; what others may not read there is hidden). Root there has nine capabilities in that namespace alone, `no_new_privs`, the same seccomp list and Landlock: on the host it is the block's first uid, with no capability, and nothing of the host's it may change. Under gVisor the sandbox's user namespace maps the same block (runsc's Sentry and gofer run in it) and the machine runs on a root of its own on the host, laid out as a native one's. Off, every process of a machine runs as its user, on one host uid, and `user: root` is refused"),
	boolSetting("e2b_public_traffic", "SANDBOX_E2B_PUBLIC_TRAFFIC", "E2B sandboxes' ports (getHost) answer without the traffic token unless a create says allowPublicTraffic false, as on E2B", func(c *Config) *bool { return &c.E2BPublicTraffic }).
		doc("as on E2B, a sandbox's ports (`getHost`) answer requests without its `e2b-traffic-access-token` unless its create says `network.allowPublicTraffic: false`; off (the default, closed), the token is needed unless the create says `true`. Whoever reaches the E2B listener reaches such ports: pair it with a listener on a network you mean to expose"),
	{Key: "api_keys", Env: "SANDBOX_API_KEYS", Usage: "API keys, name:key,name2:key2 (Authorization: Bearer key)",
		Doc: "API keys, `name:key,name2:key2`: `Authorization: Bearer <key>` on REST, MCP and `/metrics`, `X-API-KEY` on E2B's control plane. Without keys the server binds to loopback only and says so",
		get: func(c *Config) string {
			if c.APIKeys != "" {
				return "(set)"
			}
			return ""
		},
		set: func(c *Config, v string) error { c.APIKeys = v; return nil }},
	pathSetting("api_keys_file", "SANDBOX_API_KEYS_FILE", "file of API keys, one name:key per line", func(c *Config) *string { return &c.APIKeysFile }),
	sizeSetting("max_body_size", "SANDBOX_MAX_BODY_SIZE", "largest HTTP request body", func(c *Config) *int64 { return &c.MaxBodySize }).
		doc("request body limit on every surface (REST, MCP, E2B: 413, or Connect `resource_exhausted`), as sent and as inflated from gzip; a larger `Content-Length` is refused before the body is read (E2B file uploads have their own limit)"),
	durationSetting("read_timeout", "SANDBOX_READ_TIMEOUT", "time to read an HTTP request, seconds", func(c *Config) *time.Duration { return &c.ReadTimeout }).
		doc("time to read an HTTP request, seconds, on every listener: a body trickled slower is cut"),
	durationSetting("write_timeout", "SANDBOX_WRITE_TIMEOUT", "time to answer a non-streaming HTTP request, seconds", func(c *Config) *time.Duration { return &c.WriteTimeout }).
		doc("time to answer a non-streaming HTTP request, seconds; event streams are exempt"),
	durationSetting("idle_timeout", "SANDBOX_IDLE_TIMEOUT", "time an idle keep-alive HTTP connection is kept, seconds", func(c *Config) *time.Duration { return &c.IdleTimeout }).
		doc("time an idle keep-alive HTTP connection is kept, seconds. These timeouts, a 10 s header timeout (at most the read timeout) and a 64 KiB header limit hold on every listener (REST and MCP, E2B)"),
	intSetting("max_connections", "SANDBOX_MAX_CONNECTIONS", "open connections per listener (REST and MCP, E2B), within half the open-file limit; more are closed at once", func(c *Config) *int { return &c.MaxConnections }).
		doc("connections open at once per listener (REST and MCP, E2B); more are closed at once (logged, counted in `sandbox_connections_refused_total`). Half the open-file limit (raised to its hard limit at start) is kept for sandboxes: the caps shrink to fit the other half"),
	intSetting("max_connections_per_client", "SANDBOX_MAX_CONNECTIONS_PER_CLIENT", "open connections per listener from one client address", func(c *Config) *int { return &c.MaxConnectionsPerClient }),
	durationSetting("stream_write_timeout", "SANDBOX_STREAM_WRITE_TIMEOUT", "time one write of a stream may take before its client is dropped, seconds", func(c *Config) *time.Duration { return &c.StreamWriteTimeout }).
		doc("time one write of a stream (event streams, MCP notifications, E2B and peer streams) may take, seconds: a client that stops reading is dropped then; its run never waits for it"),
	durationSetting("shutdown_grace", "SANDBOX_SHUTDOWN_GRACE", "on SIGTERM, how long running executions may finish, seconds", func(c *Config) *time.Duration { return &c.ShutdownGrace }).
		doc("on SIGTERM: stop accepting, let requests finish this long (seconds), then cut the uploads still arriving (503) and cancel the rest; their answers get 5 s more, then every connection left is closed; park the sessions (within this long again), tear down every sandbox, flush the audit log"),
	dbSetting("audit_db", "SANDBOX_AUDIT_DB", "audit log: an SQLite file (default $XDG_STATE_HOME/codecage/audit.db) or a postgres:// URL shared by replicas", func(c *Config) *string { return &c.AuditDB }).
		doc("audit log: an SQLite file, or a `postgres://` URL: one log shared by replicas, which also holds their registry").
		shown("`$XDG_STATE_HOME/codecage/audit.db`, else `~/.local/state/codecage/audit.db`"),
	boolSetting("audit_code", "SANDBOX_AUDIT_CODE", "store executed code in the audit log (its hash always is)", func(c *Config) *bool { return &c.AuditCode }).
		doc("store the code itself in the audit log, not only its SHA-256"),
	intSetting("audit_buffer", "SANDBOX_AUDIT_BUFFER", "audit events buffered before they are dropped (and counted)", func(c *Config) *int { return &c.AuditBuffer }).
		doc("audit events buffered for the writer; a full buffer drops and counts them (metric, and an `audit_dropped` row once writes succeed again)"),
	stringSetting("replica_url", "SANDBOX_REPLICA_URL", "this replica's base URL for the other replicas (http://POD_IP:8001); set, the server joins the cluster registered in the postgres:// SANDBOX_AUDIT_DB", func(c *Config) *string { return &c.ReplicaURL }),
	stringSetting("replica_name", "SANDBOX_REPLICA_NAME", "this replica's name in messages and the registry (default: the host name)", func(c *Config) *string { return &c.ReplicaName }).
		doc("this replica's name in logs, audit rows and the registry").
		shown("the host name"),
	{Key: "peer_secret", Env: "SANDBOX_PEER_SECRET", Usage: "secret the replicas of a cluster share to authenticate each other (16+ characters)",
		get: func(c *Config) string {
			if c.PeerSecret != "" {
				return "(set)"
			}
			return ""
		},
		set: func(c *Config, v string) error { c.PeerSecret = v; return nil }},
	dbSetting("snapshot_store", "SANDBOX_SNAPSHOT_STORE", "where paused sessions and snapshots are kept: a directory or a postgres:// URL (default: the postgres:// SANDBOX_AUDIT_DB, else $SANDBOX_STATE_DIR/snapshots)", func(c *Config) *string { return &c.SnapshotStore }).
		doc("where snapshots and parked sessions are kept: a directory (a single server finds them again after a restart) or a `postgres://` URL every replica reaches (blobs in 1 MiB rows, one transaction per snapshot)").
		shown("the `postgres://` `SANDBOX_AUDIT_DB`, else `$SANDBOX_STATE_DIR/snapshots`"),
	{Key: "snapshot_secret", Env: "SANDBOX_SNAPSHOT_SECRET", Usage: "secret that seals snapshots (32+ characters, the same on every replica; required with a PostgreSQL store)",
		Doc: "the secret (32+ characters, e.g. `openssl rand -hex 32`) that seals every snapshot and parked session (HMAC-SHA256 over the manifest and each blob); a tampered one, or one shown under another owner, is refused before any byte of it is loaded. Unset with a directory store: generated once into `$SANDBOX_STATE_DIR/snapshot-secret` (mode 0600). With a PostgreSQL store it must be set, the same on every replica: the store refuses to open without it", Default: "generated (directory store)",
		get: func(c *Config) string {
			if c.SnapshotSecret != "" {
				return "(set)"
			}
			return ""
		},
		set: func(c *Config, v string) error {
			if len(v) < MinSnapshotSecret {
				return fmt.Errorf("want at least %d characters (e.g. openssl rand -hex 32)", MinSnapshotSecret)
			}
			c.SnapshotSecret = v
			return nil
		}},
	sizeSetting("snapshot_max_bytes", "SANDBOX_SNAPSHOT_MAX_BYTES", "bytes one owner's snapshots and paused sessions may take in all", func(c *Config) *int64 { return &c.SnapshotMaxBytes }).
		doc("bytes one owner's snapshots and parked sessions may take in all; checked before a write and while it streams (a write that passes the limit stops there and keeps nothing)"),
	intSetting("snapshot_max_count", "SANDBOX_SNAPSHOT_MAX_COUNT", "snapshots and paused sessions one owner may keep", func(c *Config) *int { return &c.SnapshotMaxCount }),
	longDurationSetting("snapshot_ttl", "SANDBOX_SNAPSHOT_TTL", "how long a snapshot or paused session is kept: seconds, or e.g. 12h, 7d", func(c *Config) *time.Duration { return &c.SnapshotTTL }).
		doc("how long a snapshot or parked session is kept: seconds, or a number with `s`, `m`, `h` or `d` (at most 365 days); expired ones are collected"),
	longDurationSetting("paused_in_memory_ttl", "SANDBOX_PAUSED_IN_MEMORY_TTL", "how long a session paused with its memory stays in this server's memory before it is parked in the snapshot store (memory and slot freed): seconds, or e.g. 15m, 2h", func(c *Config) *time.Duration { return &c.PausedInMemoryTTL }).
		doc("how long a session paused with its memory stays frozen in this server's memory (seconds, or e.g. `15m`, `2h`); then it is parked in the snapshot store: its memory and slot are freed, and the next request (or a resume) brings it back under its id"),
	boolSetting("park_on_shutdown", "SANDBOX_PARK_ON_SHUTDOWN", "on SIGTERM, park every session in the snapshot store (after the running requests end), so that a restart or another replica resumes it", func(c *Config) *bool { return &c.ParkOnShutdown }).
		doc("on SIGTERM, after the running requests end, park every session in the snapshot store: a single server resumes them after its restart (a directory store), any replica after a drain (a PostgreSQL store); false: they end with the server"),
	choiceSetting("log_format", "SANDBOX_LOG_FORMAT", "log format: text or json", []string{"text", "json"}, func(c *Config) *string { return &c.LogFormat }).
		doc("log format: text or json (slog on stderr, one line per request with its execution id)"),
	choiceSetting("log_level", "SANDBOX_LOG_LEVEL", "log level: debug, info, warn or error", []string{"debug", "info", "warn", "error"}, func(c *Config) *string { return &c.LogLevel }),
	listSetting("kernels", "SANDBOX_KERNELS", "languages besides Python a session's code may run in: javascript, typescript, bash (default: none; all three with the E2B surface)", func(c *Config) *[]string { return &c.Kernels }).
		doc("languages besides Python a session's code may run in: javascript, typescript, bash (`runCode`'s `language`, and REST's and MCP's execute `language`: on every surface once set). Their kernels run in the session's jail, which bounds them as it bounds Python, but neither the import policy nor `SANDBOX_ALLOWED_COMMANDS` applies to them: a bash or node kernel can start any program of the jail's root").
		shown("none; `javascript,typescript,bash` with the E2B surface"),
	listSetting("allowed_commands", "SANDBOX_ALLOWED_COMMANDS", "programs run_command may run (the kernel refuses the rest)", func(c *Config) *[]string { return &c.AllowedCommands }).
		doc("programs `run_command` may run: the command jail's root holds only these, and the kernel refuses the rest. Where `python3` is allowed and no `python` is, `python` runs it (a link in the command jail). With the default list, the E2B surface adds `bash` and the programs agents expect in a shell"),
	durationSetting("command_timeout", "SANDBOX_COMMAND_TIMEOUT", "default wall-clock limit of a command, seconds", func(c *Config) *time.Duration { return &c.CommandTimeout }),
	durationSetting("max_command_timeout", "SANDBOX_MAX_COMMAND_TIMEOUT", "largest timeout a command may ask for, seconds", func(c *Config) *time.Duration { return &c.MaxCommandTime }),
	listSetting("blocked_packages", "SANDBOX_BLOCKED_PACKAGES", "packages pip_install refuses (default: the built-in list)", func(c *Config) *[]string { return &c.BlockedPackages }).
		doc("packages `pip_install` refuses; a dependency that is blocked is removed and the install fails").
		shown("the built-in list"),
	{Key: "pip_index_url", Env: "SANDBOX_PIP_INDEX_URL", Usage: "package index pip_install may reach (through the egress proxy)",
		Doc: "package index `pip_install` may reach, through the egress proxy (with PyPI, its file host too)",
		get: func(c *Config) string { return c.PipIndexURL },
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
				return errors.New("want an http(s) URL such as https://pypi.org/simple")
			}
			c.PipIndexURL = strings.TrimSuffix(v, "/")
			return nil
		}},
	pathSetting("pip_find_links", "SANDBOX_PIP_FIND_LINKS", "a local wheelhouse directory; pip_install then needs no network", func(c *Config) *string { return &c.PipFindLinks }).
		doc("a local wheelhouse directory, bound read-only; `pip_install` then has no network at all"),
	sizeSetting("pip_max_download", "SANDBOX_PIP_MAX_DOWNLOAD", "bytes one pip_install may download", func(c *Config) *int64 { return &c.PipMaxDownload }).
		doc("bytes one `pip_install` may download (the size of its `/tmp`)"),
	sizeSetting("pip_max_install", "SANDBOX_PIP_MAX_INSTALL", "bytes a session's installed packages may take", func(c *Config) *int64 { return &c.PipMaxInstall }).
		doc("bytes a session's installed packages may take (its package directory, a tmpfs of this size)"),
	durationSetting("pip_timeout", "SANDBOX_PIP_TIMEOUT", "wall-clock limit of one pip_install, seconds", func(c *Config) *time.Duration { return &c.PipTimeout }),
	pathSetting("tools_config", "SANDBOX_TOOLS_CONFIG", "JSON file of upstream MCP servers whose tools code may call (code mode)", func(c *Config) *string { return &c.ToolsConfig }),
	intSetting("tools_max_calls", "SANDBOX_TOOLS_MAX_CALLS", "upstream tool calls one execution may make", func(c *Config) *int { return &c.ToolsMaxCalls }).
		doc("upstream tool calls one execution may make; refused calls (a tool outside the run's list) count too"),
	intSetting("gateway_max_calls", "SANDBOX_GATEWAY_MAX_CALLS", "tool calls one sandbox's MCP gateway may make over its life", func(c *Config) *int { return &c.GatewayMaxCalls }).
		doc("tool calls one sandbox's MCP gateway (E2B's `mcp` on create: servers of `SANDBOX_TOOLS_CONFIG` with a `gateway` block, started for that sandbox outside it) may make over the sandbox's life"),
	sizeSetting("tools_max_result", "SANDBOX_TOOLS_MAX_RESULT", "largest upstream tool result handed to code", func(c *Config) *int64 { return &c.ToolsMaxResult }),
	durationSetting("tools_timeout", "SANDBOX_TOOLS_TIMEOUT", "time limit of one upstream tool call, seconds", func(c *Config) *time.Duration { return &c.ToolsTimeout }),
	pathSetting("packages_dir", "SANDBOX_PACKAGES_DIR", "the operator's package layer (codecage packages install), read-only in sandboxes", func(c *Config) *string { return &c.PackagesDir }).
		doc("the operator's package layer (`codecage packages install`), bound read-only into every sandbox started afterwards; its modules are importable in every profile").
		shown("`$SANDBOX_STATE_DIR/packages`"),
	listSetting("operator_keys", "SANDBOX_OPERATOR_KEYS", "names of the API keys that are operators: they build and remove environments (/environments); without API keys the caller on loopback is the operator", func(c *Config) *[]string { return &c.OperatorKeys }),
	intSetting("env_max_builds", "SANDBOX_ENV_MAX_BUILDS", "environment builds running at once (then: busy)", func(c *Config) *int { return &c.EnvMaxBuilds }).
		doc("environment builds running at once; another is refused as busy (503)"),
	longDurationSetting("env_build_timeout", "SANDBOX_ENV_BUILD_TIMEOUT", "wall-clock limit of one environment build: seconds, or e.g. 30m, 2h", func(c *Config) *time.Duration { return &c.EnvBuildTimeout }),
	durationSetting("env_ready_timeout", "SANDBOX_ENV_READY_TIMEOUT", "how long a session from an environment waits for its ready command to succeed, seconds", func(c *Config) *time.Duration { return &c.EnvReadyTimeout }),
	sizeSetting("env_max_layer", "SANDBOX_ENV_MAX_LAYER", "bytes the Python packages of one requirements environment may take", func(c *Config) *int64 { return &c.EnvMaxLayer }),
	pathSetting("environments_dir", "SANDBOX_ENVIRONMENTS_DIR", "where built environments are kept (default: the state directory's environments/); read-only roots, owned by the operator", func(c *Config) *string { return &c.EnvironmentsDir }).
		shown("`$SANDBOX_STATE_DIR/environments`"),
	stringSetting("default_environment", "SANDBOX_DEFAULT_ENVIRONMENT", "the environment of runs and sessions that name none (default: none, the host's root)", func(c *Config) *string { return &c.DefaultEnvironment }).
		doc("the environment of runs and sessions that name none").
		shown("none (the host's root)"),
	pathSetting("env_debian_cache", "SANDBOX_ENV_DEBIAN_CACHE", "directory that keeps the .deb files Debian-package environment builds download, so that the next build of the same packages downloads nothing (default: none, each build downloads all)", func(c *Config) *string { return &c.EnvDebianCache }).
		doc("directory that keeps the .deb files Debian-package environment builds download, so that the next build of the same packages downloads nothing; apt checks each file's hash before it uses it").
		shown("none (each build downloads all)"),
	stringSetting("env_debian_mirror", "SANDBOX_ENV_DEBIAN_MIRROR", "Debian mirror of Debian-package environments (default: the build tool's, deb.debian.org)", func(c *Config) *string { return &c.EnvDebianMirror }).
		doc("Debian mirror of Debian-package environments").
		shown("the build tool's (deb.debian.org)"),
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

func lookupSetting(key string) (setting, bool) {
	key = strings.ReplaceAll(key, "-", "_")
	for _, s := range settings {
		if s.Key == key {
			return s, true
		}
	}
	return setting{}, false
}
