package fleet

import (
	"cmp"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// This file is the one place where a description of work becomes the
// sandbox it runs in (runc keeps one specconv the same way): every
// jail.Spec and jail.Limits the program hands the backends is filled here
// (a zygote's and each kind of work's; the fleet then only adjusts them). The
// service decides what a request needs (its limits within the operator's
// bounds, its profiles, its workspace, its network); the fleet decides
// what that means to the jail.

// Kind is what a sandbox is for.
type Kind uint8

// The kinds of work.
const (
	Pooled   Kind = iota + 1 // the harness, waiting in a pool for runs
	Run                      // one stateless Python run
	Session                  // a session's interpreter, on its workspace
	Command                  // one shell command or program
	Pip                      // pip, installing into a session's package directory
	Validate                 // the static analyzer
)

// Work describes one sandbox to build.
type Work struct {
	Kind Kind
	// ID names the sandbox (audit rows, egress logs); empty for pooled
	// sandboxes and the analyzer, which get none.
	ID string
	// Interpreter is the Python the harness, the analyzer or pip runs under.
	Interpreter string
	// Argv is the program of a Command, and pip's arguments after the
	// interpreter for Pip.
	Argv []string
	// Env is a Command's whole environment; the other kinds get theirs
	// from the kind.
	Env []string
	// Limits bound the sandbox: from one of Caps' methods. A session's
	// sandbox lives up to Lifetime; each request arms its own budget.
	Limits   Limits
	Lifetime time.Duration
	// DataScience shows the data-science packages; Preload imports numpy
	// and pandas before any request (pooled data_science sandboxes).
	DataScience, Preload bool
	// Layer is the operator's package layer, read-only (runs, sessions,
	// pools); Binds are further host directories (pip's wheelhouse).
	Layer, Binds []Bind
	// Workspace is the host directory seen at WorkspaceDir; Site, a
	// session's package directory; HostUID the uid the sandbox runs as
	// (0: one of its own).
	Workspace, Site string
	HostUID         int
	// Tmp is a session's /tmp on the host, shared by its interpreter and
	// its commands ("": the sandbox's own).
	Tmp string
	// Home is a session's home setting, or a command's home directory;
	// Vars are a session's own environment variables.
	Home string
	Vars map[string]string
	// Programs are the programs a command jail shows (from Root when set).
	Programs *Programs
	// Root is the host directory of an environment's root filesystem,
	// the sandbox's system directories ("": the host's); EnvLayer its
	// Python packages layer, bound read-only at runtime.EnvDir ("":
	// none). Preimport are modules a pooled sandbox or a zygote imports
	// before any request (an environment's). Pip and the analyzer run on
	// the host's root whatever these say.
	Root, EnvLayer string
	Preimport      []string
	// Forward carries the sandbox's connections to its proxy (network
	// runs, sessions and pip), whose address the sandbox's environment names.
	Forward *Forward
	// Trust is the host directory of the proxy's trust store (the
	// sandbox's authority's certificate), bound read-only at
	// runtime.TrustDir and named by TrustVars for a Session, a Run or a
	// Command.
	Trust string
	// LoopbackServers: a command (or a machine session's processes) may
	// serve on TCP ports of its loopback (jail.Spec.LoopbackServers),
	// which the host reaches with DialPort.
	LoopbackServers bool
	// NetNS is the session's network namespace, which a Session (its
	// interpreter restarted) or a Command joins: nil for a new one.
	NetNS *NetNS
	// Stdout and Stderr receive a Command's or pip's output.
	Stdout, Stderr io.Writer
	// Stdin gives a Command a stdin pipe; Terminal runs it on a terminal
	// of that size instead (see Lease.WriteInput).
	Stdin    bool
	Terminal *WindowSize
	// Machine makes a Session's sandbox its one process tree: its
	// commands start inside it (Lease.Spawn), and its workspace and /tmp
	// may hold programs.
	Machine bool
	// MachineRoot is a machine Session's own / on the host
	// (jail.Spec.MachineRoot): writable, kept across its restarts.
	MachineRoot string
	// RootInside: the machine's HostUID is the user's of a block of ids
	// (ReserveMachineIDs), and its processes may run as root inside
	// (jail.Spec.RootInside).
	RootInside bool
}

// MachineBin holds a machine's other names of its programs (python for
// its interpreter), last on its commands' PATH, so a root's own win.
const MachineBin = "/opt/codecage/bin"

// MachineSudoDir holds the sudo of a machine with root inside
// (jail.SudoPath): first on its commands' PATH, before any root's own
// set-user-ID one, which cannot work under no_new_privs.
var MachineSudoDir = path.Dir(jail.SudoPath)

// Spec is the sandbox the work runs in.
func (w Work) Spec() Spec {
	spec := Spec{ID: w.ID, Limits: w.Limits, Forward: w.Forward, Stdout: w.Stdout, Stderr: w.Stderr}
	switch w.Kind {
	case Pooled, Run:
		spec.Argv, spec.Env, spec.Binds = runtime.Argv(w.Interpreter), runtime.Env(), w.envBinds(w.Layer)
		spec.Root = w.Root
		if len(w.Vars) > 0 {
			spec.Env = withVars(spec.Env, w.Vars)
		}
	case Session:
		spec.Argv, spec.Env = runtime.Argv(w.Interpreter), runtime.Env()
		spec.Workspace, spec.HostUID, spec.Home, spec.Tmp = w.Workspace, w.HostUID, w.Home, w.Tmp
		spec.Binds = append([]Bind{{Host: w.Site, Path: runtime.SiteDir}}, w.envBinds(w.Layer)...)
		spec.Root = w.Root
		if w.Home != "" || len(w.Vars) > 0 {
			spec.Env = sessionEnv(spec.Env, HomeOf(w.Home), w.Vars)
		}
		spec.Limits.Timeout = w.Lifetime
		spec.Limits.CPUTime = w.Lifetime // per-process rlimit; each request arms its own budget
		spec.NetNS = w.NetNS
		spec.Machine, spec.MachineRoot = w.Machine, w.MachineRoot
		spec.RootInside = w.Machine && w.RootInside
		if w.Machine {
			// One Python: the interpreter imports what a command's pip
			// install put in the home (the user site), and is python too
			// (MachineBin, last on a machine's PATH).
			spec.Env = append(slices.Clone(spec.Env), "CODECAGE_USER_SITE=1")
			spec.Links = map[string]string{MachineBin + "/python": cmp.Or(w.Interpreter, runtime.DefaultInterpreter)}
		}
		// Its namespace (lo only) is the wall: the code may serve on
		// ports and reach the servers of the session's commands, which
		// share it. Spares start before their session's request, so this
		// holds for every session. One with the network profile keeps
		// Landlock's rule (a TCP connect to its proxy's port alone).
		// A machine's commands are its processes: with servers asked
		// for, they may serve and connect on its loopback either way.
		spec.LoopbackServers = w.Forward == nil || w.Machine && w.LoopbackServers
	case Command:
		spec.Argv, spec.Env, spec.Home, spec.Programs = w.Argv, w.Env, w.Home, w.Programs
		spec.Root = w.Root
		spec.Workspace, spec.HostUID, spec.Tmp = w.Workspace, w.HostUID, w.Tmp
		spec.Stdin, spec.Terminal = w.Stdin, w.Terminal
		spec.NoChannel = true
		spec.LoopbackServers = w.LoopbackServers
		spec.NetNS = w.NetNS
		// An environment's packages layer: its python3 imports them as
		// runs do (a command's Python reads no site.py otherwise).
		if w.EnvLayer != "" {
			spec.Binds = w.envBinds(nil)
			spec.Env = append(slices.Clone(spec.Env), "PYTHONPATH="+runtime.EnvDir)
		}
	case Pip:
		spec.Argv = append([]string{w.Interpreter}, w.Argv...)
		spec.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp", "PIP_NO_INPUT=1"}
		spec.Workspace, spec.HostUID, spec.Binds = w.Workspace, w.HostUID, w.Binds
		spec.NoChannel = true
	case Validate:
		spec.Argv, spec.Env = runtime.ValidatorArgv(w.Interpreter), runtime.Env()
	}
	if w.DataScience {
		spec.Env, spec.ReadOnlyBinds = runtime.DataScienceEnv(spec.Env)
	}
	if pre := w.preloads(); len(pre) > 0 {
		spec.Env = append(spec.Env, "CODECAGE_PRELOAD="+strings.Join(pre, ","))
	}
	if w.Forward != nil {
		spec.Env = append(spec.Env, proxyEnv(w.Forward.Port)...)
	}
	if w.Trust != "" && (w.Kind == Session || w.Kind == Command || w.Kind == Run) {
		spec.Binds = append(slices.Clip(spec.Binds), Bind{Host: w.Trust, Path: runtime.TrustDir})
		if w.Kind != Command {
			for _, k := range slices.Sorted(maps.Keys(trustVars)) {
				spec.Env = append(spec.Env, k+"="+trustVars[k])
			}
		}
	}
	return spec
}

// trustVars point the usual TLS clients at a sandbox's trust store: the
// root's authorities and its proxy's (OpenSSL and what uses it: Python's
// ssl, curl's tool, git; requests; Node, which keeps its own and adds).
var trustVars = map[string]string{
	"SSL_CERT_FILE":       runtime.TrustDir + "/bundle.pem",
	"REQUESTS_CA_BUNDLE":  runtime.TrustDir + "/bundle.pem",
	"CURL_CA_BUNDLE":      runtime.TrustDir + "/bundle.pem",
	"GIT_SSL_CAINFO":      runtime.TrustDir + "/bundle.pem",
	"NODE_EXTRA_CA_CERTS": runtime.TrustDir + "/ca.pem",
}

// TrustDir is where a sandbox with a trust store finds it.
const TrustDir = runtime.TrustDir

// TrustVars are the variables of a sandbox with a trust store (a
// session's commands get them, as its interpreter).
func TrustVars() map[string]string { return maps.Clone(trustVars) }

// FromEnvironment is w started from environment e (envstore): the
// system directories of its root, its layer, its Python, and its
// variables under w's own. The zero Env (the host's root) changes nothing.
func (w Work) FromEnvironment(e envstore.Env) Work {
	w.Root, w.EnvLayer = e.RootDir, e.LayerDir
	if e.Python != "" {
		w.Interpreter = e.Python
	}
	if len(e.Vars) > 0 {
		vars := maps.Clone(e.Vars)
		maps.Copy(vars, w.Vars)
		w.Vars = vars
	}
	return w
}

// envBinds are the environment's layer, if any, then layer.
func (w Work) envBinds(layer []Bind) []Bind {
	if w.EnvLayer == "" {
		return layer
	}
	return append([]Bind{{Host: w.EnvLayer, Path: runtime.EnvDir}}, layer...)
}

// preloads are the modules imported before any request: numpy and pandas
// for a pooled data_science sandbox, then the environment's.
func (w Work) preloads() []string {
	var out []string
	if w.Preload {
		out = append(out, "numpy", "pandas")
	}
	for _, m := range w.Preimport {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// zygoteSpec is the zygote of a class whose sandboxes are cell: its own
// Python, which forks the cells, sees what they see.
func zygoteSpec(interpreter string, cell Spec) Spec {
	lim := cell.Limits
	lim.Timeout = 365 * 24 * time.Hour // lives as long as the service
	lim.CPUTime = 365 * 24 * time.Hour
	lim.MemoryBytes = max(cell.Limits.MemoryBytes, 256<<20) // the zygote alone; cells have their own cgroups
	lim.MaxProcesses = 256                                  // cells in their first instant, before they move out
	// The zygote's own Python, which forks; cells run in their own cgroups.
	lim.CPUCores = max(cell.Limits.CPUCores, 1)
	return Spec{
		Argv:             runtime.ZygoteArgv(interpreter),
		Env:              runtime.ZygoteEnv(cell.Env),
		ReadOnlyBinds:    cell.ReadOnlyBinds,
		Binds:            cell.Binds,
		Root:             cell.Root,
		Limits:           lim,
		Nested:           true,
		SeqPacketChannel: true,
	}
}

// proxyEnv points the usual proxy variables at the sandbox's proxy.
func proxyEnv(port int) []string {
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	return []string{"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "http_proxy=" + url, "https_proxy=" + url, "NO_PROXY=", "no_proxy="}
}

// withVars is base with vars set, in a stable order.
func withVars(base []string, vars map[string]string) []string {
	m := map[string]string{}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	for k, v := range vars {
		m[k] = v
	}
	return sortedEnv(m)
}

// sessionEnv is base with the session's home and its own variables, in
// a stable order.
func sessionEnv(base []string, home string, vars map[string]string) []string {
	m := map[string]string{}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	m["HOME"], m["USER"] = home, UserOf(home)
	for k, v := range vars {
		m[k] = v
	}
	return sortedEnv(m)
}

// sortedEnv is m as an environment, by name.
func sortedEnv(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(m))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}

// Caps are the operator's bounds that every sandbox shares, whatever the
// work (SANDBOX_CPU_LIMIT, SANDBOX_MEMORY_LIMIT, ...).
type Caps struct {
	CPUCores     float64
	Memory       int64 // the default memory limit
	Output       int64 // the default cap on stdout and stderr, each
	MaxProcesses int
	FileSize     int64
	OpenFiles    int
	Tmp          int64
	Workspace    int64
}

// Need is what a run or a session asks of its limits, already checked
// against the operator's maxima and given its defaults by the service.
type Need struct {
	Timeout, CPUTime time.Duration
	Memory, Output   int64
}

// Run are the limits of a run or a session.
func (c Caps) Run(n Need) Limits {
	return Limits{
		Timeout:        n.Timeout,
		CPUTime:        n.CPUTime,
		MemoryBytes:    n.Memory,
		OutputBytes:    n.Output,
		CPUCores:       c.CPUCores,
		MaxProcesses:   c.MaxProcesses,
		FileSizeBytes:  c.FileSize,
		OpenFiles:      c.OpenFiles,
		TmpBytes:       c.Tmp,
		WorkspaceBytes: c.Workspace,
	}
}

// Pooled are the limits a pooled sandbox starts with: it waits up to idle
// until a run arms its own; cpu is the per-process rlimit (runs arm a
// budget).
func (c Caps) Pooled(idle, cpu time.Duration, memory int64) Limits {
	return Limits{
		Timeout:        idle,
		CPUTime:        cpu,
		CPUCores:       c.CPUCores,
		MemoryBytes:    memory,
		OutputBytes:    c.Output,
		MaxProcesses:   c.MaxProcesses,
		FileSizeBytes:  c.FileSize,
		OpenFiles:      c.OpenFiles,
		TmpBytes:       c.Tmp,
		WorkspaceBytes: c.Workspace,
	}
}

// Command are the limits of a command that may run up to timeout.
func (c Caps) Command(timeout time.Duration) Limits {
	return Limits{
		Timeout: timeout, CPUTime: timeout, CPUCores: c.CPUCores, MemoryBytes: c.Memory, OutputBytes: c.Output,
		MaxProcesses: c.MaxProcesses, FileSizeBytes: c.FileSize, OpenFiles: c.OpenFiles,
		TmpBytes: c.Tmp, WorkspaceBytes: c.Workspace,
	}
}

// Pip are the limits of one pip install: download bytes of scratch space
// (its downloads), install bytes of package directory.
func (c Caps) Pip(timeout time.Duration, download, install int64) Limits {
	return Limits{
		Timeout: timeout, CPUTime: timeout, CPUCores: c.CPUCores, MemoryBytes: max(c.Memory, 512<<20),
		OutputBytes: 1 << 20, MaxProcesses: c.MaxProcesses, FileSizeBytes: max(download, install),
		OpenFiles: c.OpenFiles, TmpBytes: download, WorkspaceBytes: install,
	}
}

// Validate are the analyzer's limits: parsing is quick, but the source is
// untrusted (deep nesting can make the parser itself expensive).
func (c Caps) Validate() Limits {
	return Limits{Timeout: 15 * time.Second, CPUTime: 15 * time.Second, MemoryBytes: 512 << 20, CPUCores: c.CPUCores}
}

// ProbeSandbox builds the smallest sandbox there is, /bin/true in it,
// the way every run builds one: the doctor's proof that this host can.
func ProbeSandbox() error { return probeSandbox() }
