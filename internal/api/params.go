package api

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// The parameter objects below are the wire shapes shared by the MCP tools
// and the REST API, so both surfaces accept the same fields and check them
// the same way. The jsonschema tags describe them to MCP clients, the doc
// tags to the OpenAPI document.

// ExecuteParams are the arguments of execute_code and POST /execute.
type ExecuteParams struct {
	Code           string   `json:"code" jsonschema:"Python 3 source to run. Print what you want to see, or end with an expression: its value is returned as result." doc:"Python 3 source to run. Print what you want to see, or end with an expression: its value is returned as result."`
	Timeout        float64  `json:"timeout,omitempty" jsonschema:"Wall-clock limit in seconds (default 30, at most the server's maximum, usually 300)." doc:"Wall-clock limit in seconds (default 30, at most the server's maximum, usually 300)."`
	Profile        string   `json:"profile,omitempty" jsonschema:"Capability profile(s), comma-separated: basic, data_science, network, filesystem. Each must be enabled by the operator (see get_sandbox_info). Default: every enabled profile (get_sandbox_info: default_profiles). Not allowed with session_id." doc:"Capability profile(s), comma-separated: basic, data_science, network, filesystem. Each must be enabled by the operator (see /info). Default: every enabled profile (/info: default_profiles). Not allowed with session_id."`
	AllowedImports []string `json:"allowed_imports,omitempty" jsonschema:"Narrow the importable top-level modules to this list (within what the profiles allow)." doc:"Narrow the importable top-level modules to this list (within what the profiles allow)."`
	MemoryLimit    string   `json:"memory_limit,omitempty" jsonschema:"Memory limit such as 256m or 1g (default: the server's, larger for data_science)." doc:"Memory limit such as 256m or 1g (default: the server's, larger for data_science)."`
	SessionID      string   `json:"session_id,omitempty" jsonschema:"Run in this session (from create_session): variables, imports and /workspace files persist between calls." doc:"Run in this session (from POST /sessions): variables, imports and /workspace files persist between calls."`
	UseContainer   bool     `json:"use_container,omitempty" jsonschema:"Run under the gVisor backend, a user-space kernel between the code and the host's (only where the operator enabled container mode). With session_id, the session's backend applies (chosen when it was created)." doc:"Run under the gVisor backend, a user-space kernel between the code and the host's (only where the operator enabled container mode). Not with session_id: a session's backend is chosen when it is created."`
	Tools          []string `json:"tools,omitempty" jsonschema:"Upstream tools the code may call as tools.<server>.<tool>(...): server.tool, server.* or server (default: every tool list_code_tools lists)." doc:"Upstream tools the code may call as tools.<server>.<tool>(...): server.tool, server.* or server (default: every tool GET /tools lists)."`
	Display        bool     `json:"display,omitempty" jsonschema:"Also return rich results, as a notebook shows them: display (the last value by MIME type: text/plain, text/html, image/png, e2b/data for a DataFrame, ...) and outputs (what the code displayed, in order: display() calls, figures as image/png and e2b/chart with their elements); figures then come in outputs, not images. Here the PNGs are attached as image content and left out of the structured result." doc:"Also return rich results, as a notebook shows them: display (the last value by MIME type: text/plain, text/html, image/png, e2b/data for a DataFrame, ...) and outputs (what the code displayed, in order: display() calls, figures as image/png and e2b/chart with their elements); figures then come in outputs, not images."`
	Language       string   `json:"language,omitempty" jsonschema:"python (default), or javascript (js), typescript (ts) or bash: a kernel of that language in the session, stateful across calls like the interpreter (with session_id only; each enabled by the operator, SANDBOX_KERNELS, see get_sandbox_info: kernels)." doc:"python (default), or javascript (js), typescript (ts) or bash: a kernel of that language in the session, stateful across calls like the interpreter (with session_id only; each enabled by the operator, SANDBOX_KERNELS, see /info: kernels)."`
	Environment    string   `json:"environment,omitempty" jsonschema:"Run in this environment, an image the operator built (its packages and system, its Python): default the server's own. Not with session_id: a session's environment is chosen when it is created." doc:"Run in this environment, an image the operator built (its packages and system, its Python; GET /environments lists them): default the server's own. Not with session_id: a session's environment is chosen when it is created."`
}

// Request checks the parameters and turns them into a service.Request for
// owner; maxTimeout is the server's, for the message.
func (p ExecuteParams) Request(maxTimeout time.Duration, owner string) (service.Request, error) {
	if p.Timeout < 0 || p.Timeout > 86400 {
		return service.Request{}, fmt.Errorf("%w: timeout %g is out of range (0 to %g seconds)", service.ErrInvalidRequest, p.Timeout, maxTimeout.Seconds())
	}
	mem, err := ParseMemory(p.MemoryLimit)
	if err != nil {
		return service.Request{}, err
	}
	return service.Request{
		Code:           p.Code,
		Timeout:        time.Duration(p.Timeout * float64(time.Second)),
		MemoryBytes:    mem,
		Profiles:       SplitProfiles(p.Profile),
		AllowedImports: p.AllowedImports,
		SessionID:      p.SessionID,
		Owner:          owner,
		UseContainer:   p.UseContainer,
		Tools:          p.Tools,
		Language:       p.Language,
		Display:        p.Display,
		Environment:    p.Environment,
	}, nil
}

// CommandParams are the arguments of run_command and POST /commands.
type CommandParams struct {
	Command    string            `json:"command" jsonschema:"A command line for /bin/sh -c: pipes, redirects and globs work. Only the allowed programs exist (see get_sandbox_info: commands)." doc:"A command line for /bin/sh -c: pipes, redirects and globs work. Only the allowed programs exist (see /info: commands)."`
	WorkingDir string            `json:"working_dir,omitempty" jsonschema:"Directory to run in, relative to the workspace (default its root)." doc:"Directory to run in, relative to the workspace (default its root)."`
	Env        map[string]string `json:"env,omitempty" jsonschema:"Environment variables to add (LD_* and PYTHON* are refused)." doc:"Environment variables to add (LD_* and PYTHON* are refused)."`
	Timeout    float64           `json:"timeout,omitempty" jsonschema:"Wall-clock limit in seconds (default 120, at most 300)." doc:"Wall-clock limit in seconds (default 120, at most 300)."`
	SessionID  string            `json:"session_id,omitempty" jsonschema:"Run in this session's workspace (its files, and the files the command writes, are shared with its code); default: a fresh, empty workspace." doc:"Run in this session's workspace (its files, and the files the command writes, are shared with its code); default: a fresh, empty workspace."`
	User       string            `json:"user,omitempty" jsonschema:"Who the command runs as: user (the default) or root, which only a machine session's commands may be (root of the sandbox's own user namespace: no host privilege)." doc:"Who the command runs as: user (the default) or root, which only a machine session's commands may be (root of the sandbox's own user namespace: no host privilege)."`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"Text given to the command's standard input, which is then closed (default: an empty stdin)." doc:"Text given to the command's standard input, which is then closed (default: an empty stdin)."`
}

// Request checks the parameters and turns them into a service.CommandRequest.
func (p CommandParams) Request(owner string) (service.CommandRequest, error) {
	if p.Timeout < 0 || p.Timeout > 86400 {
		return service.CommandRequest{}, fmt.Errorf("%w: timeout %g is out of range", service.ErrInvalidRequest, p.Timeout)
	}
	return service.CommandRequest{Command: p.Command, WorkingDir: p.WorkingDir, Env: p.Env,
		Timeout: time.Duration(p.Timeout * float64(time.Second)), SessionID: p.SessionID, Owner: owner, Input: p.Stdin, User: p.User}, nil
}

// InstallParams are the arguments of pip_install and POST /pip_install.
type InstallParams struct {
	Package   string `json:"package" jsonschema:"The package's name on the index, such as requests or requests[socks]." doc:"The package's name on the index, such as requests or requests[socks]."`
	Version   string `json:"version,omitempty" jsonschema:"latest (default), a version such as 2.31.0, or a specifier such as >=2,<3." doc:"latest (default), a version such as 2.31.0, or a specifier such as >=2,<3."`
	SessionID string `json:"session_id" jsonschema:"The session to install into (from create_session): its later runs can import the package; other sessions cannot." doc:"The session to install into (from POST /sessions): its later runs can import the package; other sessions cannot."`
}

// Request turns the parameters into a service.InstallRequest.
func (p InstallParams) Request(owner string) service.InstallRequest {
	return service.InstallRequest{Package: p.Package, Version: p.Version, SessionID: p.SessionID, Owner: owner}
}

// ValidateParams are the arguments of validate_code and POST /validate.
type ValidateParams struct {
	Code           string   `json:"code" jsonschema:"Python 3 source to check." doc:"Python 3 source to check."`
	Profile        string   `json:"profile,omitempty" jsonschema:"Profile(s) to check the imports against, comma-separated (default: every enabled profile)." doc:"Profile(s) to check the imports against, comma-separated (default: every enabled profile)."`
	AllowedImports []string `json:"allowed_imports,omitempty" jsonschema:"Check against this import list instead." doc:"Check against this import list instead."`
}

// Request turns the parameters into a service.ValidateRequest.
func (p ValidateParams) Request() service.ValidateRequest {
	return service.ValidateRequest{Code: p.Code, Profiles: SplitProfiles(p.Profile), AllowedImports: p.AllowedImports}
}

// SessionParams are the arguments of create_session and POST /sessions.
type SessionParams struct {
	Profile        string         `json:"profile,omitempty" jsonschema:"Capability profile(s) of the session, comma-separated (default: every enabled profile)." doc:"Capability profile(s) of the session, comma-separated (default: every enabled profile)."`
	AllowedImports []string       `json:"allowed_imports,omitempty" jsonschema:"Narrow the importable modules to this list." doc:"Narrow the importable modules to this list."`
	MemoryLimit    string         `json:"memory_limit,omitempty" jsonschema:"Memory limit of the session's interpreter, such as 512m." doc:"Memory limit of the session's interpreter, such as 512m."`
	UseContainer   bool           `json:"use_container,omitempty" jsonschema:"Run the session under the gVisor backend (only where the operator enabled container mode)." doc:"Run the session under the gVisor backend (only where the operator enabled container mode)."`
	FromSnapshot   string         `json:"from_snapshot,omitempty" jsonschema:"Start the session from this snapshot (its snapshot_id, from snapshot_session): its workspace files and its variables." doc:"Start the session from this snapshot (its snapshot_id, from POST /sessions/{id}/snapshots): its workspace files and its variables."`
	OnTimeout      string         `json:"on_timeout,omitempty" enum:"kill,pause,pause_files" jsonschema:"What the end of the session's life does: kill (default) ends it; pause pauses it, its memory kept, until it is resumed; pause_files pauses it without its memory (its sandbox ends, its files stay; a resume starts a fresh interpreter on them)." doc:"What the end of the session's life does: kill (default) ends it; pause pauses it, its memory kept, until it is resumed; pause_files pauses it without its memory (its sandbox ends, its files stay; a resume starts a fresh interpreter on them)."`
	Lifetime       float64        `json:"lifetime,omitempty" jsonschema:"The session's lifetime in seconds, used or not (default: it ends after the server's idle time); at its end on_timeout applies." doc:"The session's lifetime in seconds, used or not (default: it ends after the server's idle time); at its end on_timeout applies."`
	AutoResume     *bool          `json:"auto_resume,omitempty" default:"true" jsonschema:"When the session is paused, the next request on it (an execution, a file, a command) resumes it (default true); false: only resume_session does, and other requests are refused as paused." doc:"When the session is paused, the next request on it (an execution, a file, a command) resumes it (default true); false: only POST /sessions/{id}/resume does, and other requests are refused as paused (409)."`
	Environment    string         `json:"environment,omitempty" jsonschema:"Start the session from this environment, an image the operator built (its packages and system, its Python): default the server's own." doc:"Start the session from this environment, an image the operator built (its packages and system, its Python; GET /environments lists them): default the server's own."`
	Network        *NetworkParams `json:"network,omitempty" jsonschema:"The session's own egress rules, within the operator's allow list (they only narrow it); allow_out needs the network profile." doc:"The session's own egress rules, within the operator's allow list (they only narrow it); allow_out needs the network profile."`
	// EgressCredentials bind stored secrets to egress rules.
	EgressCredentials []service.EgressCredential `json:"egress_credentials,omitempty" maxItems:"64" jsonschema:"Secrets you stored (create_secret) that the egress proxy adds to the session's HTTPS requests to a host, outside the sandbox: its code never holds them. Needs the network profile." doc:"Secrets you stored (POST /secrets) that the egress proxy adds to the session's HTTPS requests to a host, outside the sandbox: its code never holds them. Needs the network profile."`
	Machine           bool                       `json:"machine,omitempty" jsonschema:"Make the session a small computer: its commands run in its own process tree beside the interpreter (what a command leaves running lives on until the session ends), run any program of its root, and may take as long as the session; python3 is the session's, with its packages. Where the operator offers machines (native or gVisor backend)." doc:"Make the session a small computer: its commands run in its own process tree beside the interpreter (what a command leaves running lives on until the session ends), run any program of its root, and may take as long as the session; python3 is the session's, with its packages. Where the operator offers machines (SANDBOX_MACHINE_SESSIONS; native or gVisor backend)."`
}

// NetworkParams are a session's own egress rules: create_session's and
// POST /sessions' network, set_session_network and PUT
// /sessions/{id}/network. A destination that matches allow_out is let
// through, else one in deny_out is refused, else it is let through; the
// operator's allow list applies first, whatever they say.
type NetworkParams struct {
	AllowOut []string `json:"allow_out,omitempty" maxItems:"256" jsonschema:"Destinations always let through: host names (api.example.com), *.suffix wildcards (every name under it, not the suffix itself), addresses and CIDR blocks. Within the operator's allow list only." doc:"Destinations always let through: host names (api.example.com), *.suffix wildcards (every name under it, not the suffix itself), addresses and CIDR blocks. Within the operator's allow list only."`
	DenyOut  []string `json:"deny_out,omitempty" maxItems:"256" jsonschema:"Addresses and CIDR blocks refused unless allow_out lets them through; 0.0.0.0/0 (or ::/0) refuses every address." doc:"Addresses and CIDR blocks refused unless allow_out lets them through; 0.0.0.0/0 (or ::/0) refuses every address."`
}

// Rules are the parameters as the service takes them.
func (n *NetworkParams) Rules() *service.NetworkRules {
	if n == nil {
		return nil
	}
	return &service.NetworkRules{AllowOut: n.AllowOut, DenyOut: n.DenyOut}
}

// OnTimeouts are the values of on_timeout.
var OnTimeouts = []any{"kill", "pause", "pause_files"}

// Request checks the parameters and turns them into a service.SessionRequest.
func (p SessionParams) Request(owner string) (service.SessionRequest, error) {
	mem, err := ParseMemory(p.MemoryLimit)
	if err != nil {
		return service.SessionRequest{}, err
	}
	switch p.OnTimeout {
	case "", "kill", "pause", "pause_files":
	default:
		return service.SessionRequest{}, fmt.Errorf("%w: on_timeout %s (want kill, pause or pause_files)", service.ErrInvalidRequest, service.Quote(p.OnTimeout))
	}
	if p.Lifetime < 0 || p.Lifetime > 86400 {
		return service.SessionRequest{}, fmt.Errorf("%w: lifetime %g is out of range (0 to 86400 seconds)", service.ErrInvalidRequest, p.Lifetime)
	}
	return service.SessionRequest{Owner: owner, Profiles: SplitProfiles(p.Profile), AllowedImports: p.AllowedImports, MemoryBytes: mem, UseContainer: p.UseContainer,
		FromSnapshot: p.FromSnapshot, OnTimeout: p.OnTimeout, ManualResume: p.AutoResume != nil && !*p.AutoResume, Environment: p.Environment,
		Lifetime: time.Duration(p.Lifetime * float64(time.Second)), Network: p.Network.Rules(), Credentials: p.EgressCredentials, Machine: p.Machine}, nil
}

// PauseParams are the arguments of pause_session and POST /sessions/{id}/pause.
type PauseParams struct {
	KeepMemory *bool `json:"keep_memory,omitempty" default:"true" jsonschema:"Keep the interpreter's memory (default true): a resume goes on where the session stood. false: only the workspace files are kept, the sandbox ends and a resume starts a fresh interpreter." doc:"Keep the interpreter's memory (default true): a resume goes on where the session stood. false: only the workspace files are kept, the sandbox ends and a resume starts a fresh interpreter."`
	Park       bool  `json:"park,omitempty" jsonschema:"Also write the paused session, memory included, into the snapshot store now, freeing its memory and its slot here (the server does it after SANDBOX_PAUSED_IN_MEMORY_TTL anyway); the next request or a resume brings it back. Needs keep_memory. A session already paused in memory may be parked." doc:"Also write the paused session, memory included, into the snapshot store now, freeing its memory and its slot here (the server does it after SANDBOX_PAUSED_IN_MEMORY_TTL anyway); the next request or a resume brings it back. Needs keep_memory. A session already paused in memory may be parked."`
}

// Keep says whether the pause keeps the session's memory (the default).
func (p PauseParams) Keep() bool { return p.KeepMemory == nil || *p.KeepMemory }

// Mode is the pause the parameters ask for.
func (p PauseParams) Mode() service.PauseMode {
	return service.PauseMode{KeepMemory: p.Keep(), Park: p.Park}
}

// SnapshotParams are the arguments of snapshot_session and POST /sessions/{id}/snapshots.
type SnapshotParams struct {
	Name string `json:"name,omitempty" jsonschema:"A name for the snapshot (at most 128 bytes of printable text): list_snapshots finds it by it." doc:"A name for the snapshot (at most 128 bytes of printable text): GET /snapshots?name= finds it by it."`
}

// Check refuses a name the service would not keep (the service's one
// rule), before anything is looked up.
func (p SnapshotParams) Check() (string, error) {
	return p.Name, service.CheckSnapshotName(p.Name)
}

// ForkParams are the arguments of fork_session and POST /sessions/{id}/fork.
type ForkParams struct {
	Count    *int    `json:"count,omitempty" default:"1" jsonschema:"How many copies to make, 1 to 100 (default 1)." doc:"How many copies to make, 1 to 100 (default 1)."`
	Lifetime float64 `json:"lifetime,omitempty" jsonschema:"Each copy's lifetime in seconds, used or not (default: a session's, ended after the server's idle time)." doc:"Each copy's lifetime in seconds, used or not (default: a session's, ended after the server's idle time)."`
}

// Fork checks the parameters: the number of copies and their lifetime.
func (p ForkParams) Fork() (count int, lifetime time.Duration, err error) {
	count = 1
	if p.Count != nil {
		count = *p.Count
	}
	if count < 1 || count > service.MaxForks {
		return 0, 0, fmt.Errorf("%w: count %d is out of range (1 to %d)", service.ErrInvalidRequest, count, service.MaxForks)
	}
	if p.Lifetime < 0 || p.Lifetime > 86400 {
		return 0, 0, fmt.Errorf("%w: lifetime %g is out of range (0 to 86400 seconds)", service.ErrInvalidRequest, p.Lifetime)
	}
	return count, time.Duration(p.Lifetime * float64(time.Second)), nil
}

// SnapshotQuery narrows list_snapshots and GET /snapshots.
type SnapshotQuery struct {
	SessionID string `json:"session_id,omitempty" query:"session_id" jsonschema:"Only the snapshots of this session." doc:"Only the snapshots of this session."`
	Name      string `json:"name,omitempty" query:"name" jsonschema:"Only the snapshot with this name (or id)." doc:"Only the snapshot with this name (or id)."`
}

// Filter is the query as the service takes it.
func (q SnapshotQuery) Filter() service.SnapshotFilter {
	return service.SnapshotFilter{SessionID: q.SessionID, Name: q.Name}
}

// FileEncodings are the encodings of file contents on the wire.
var FileEncodings = []any{"utf-8", "base64"}

// DecodeContent returns the bytes of a file's content in encoding
// (utf-8, the default, or base64).
func DecodeContent(content, encoding string) ([]byte, error) {
	switch strings.ToLower(encoding) {
	case "", "utf-8", "utf8", "text":
		return []byte(content), nil
	case "base64":
		data, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, fmt.Errorf("%w: content is not base64: %v", service.ErrInvalidRequest, err)
		}
		return data, nil
	}
	return nil, fmt.Errorf("%w: encoding %s (want utf-8 or base64)", service.ErrInvalidRequest, service.Quote(encoding))
}

// ParseMemory reads a memory limit such as 256m ("" is the default, 0).
func ParseMemory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := config.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("%w: memory_limit %s: %v", service.ErrInvalidRequest, service.Quote(s), err)
	}
	return n, nil
}

// SplitProfiles reads a comma-separated list of profiles.
func SplitProfiles(p string) []string {
	var out []string
	for _, s := range strings.Split(p, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// SecretParams are the arguments of create_secret and POST /secrets.
type SecretParams struct {
	Name  string `json:"name" maxLength:"64" jsonschema:"The secret's name: 1 to 64 letters, digits, '_', '.' or '-'." doc:"The secret's name: 1 to 64 letters, digits, '_', '.' or '-'."`
	Value string `json:"value" maxLength:"8192" jsonschema:"The secret: sealed at rest, never shown again, never given to a sandbox." doc:"The secret: sealed at rest, never shown again, never given to a sandbox."`
}

// CredentialsParams are the arguments of set_session_egress_credentials
// and PUT /sessions/{id}/egress_credentials.
type CredentialsParams struct {
	Credentials []service.EgressCredential `json:"egress_credentials" maxItems:"64" jsonschema:"The session's bindings, replacing its others (empty: none)." doc:"The session's bindings, replacing its others (empty: none)."`
}
