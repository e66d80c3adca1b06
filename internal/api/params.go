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
	}, nil
}

// CommandParams are the arguments of run_command and POST /commands.
type CommandParams struct {
	Command    string            `json:"command" jsonschema:"A command line for /bin/sh -c: pipes, redirects and globs work. Only the allowed programs exist (see get_sandbox_info: commands)." doc:"A command line for /bin/sh -c: pipes, redirects and globs work. Only the allowed programs exist (see /info: commands)."`
	WorkingDir string            `json:"working_dir,omitempty" jsonschema:"Directory to run in, relative to the workspace (default its root)." doc:"Directory to run in, relative to the workspace (default its root)."`
	Env        map[string]string `json:"env,omitempty" jsonschema:"Environment variables to add (LD_* and PYTHON* are refused)." doc:"Environment variables to add (LD_* and PYTHON* are refused)."`
	Timeout    float64           `json:"timeout,omitempty" jsonschema:"Wall-clock limit in seconds (default 120, at most 300)." doc:"Wall-clock limit in seconds (default 120, at most 300)."`
	SessionID  string            `json:"session_id,omitempty" jsonschema:"Run in this session's workspace (its files, and the files the command writes, are shared with its code); default: a fresh, empty workspace." doc:"Run in this session's workspace (its files, and the files the command writes, are shared with its code); default: a fresh, empty workspace."`
}

// Request checks the parameters and turns them into a service.CommandRequest.
func (p CommandParams) Request(owner string) (service.CommandRequest, error) {
	if p.Timeout < 0 || p.Timeout > 86400 {
		return service.CommandRequest{}, fmt.Errorf("%w: timeout %g is out of range", service.ErrInvalidRequest, p.Timeout)
	}
	return service.CommandRequest{Command: p.Command, WorkingDir: p.WorkingDir, Env: p.Env,
		Timeout: time.Duration(p.Timeout * float64(time.Second)), SessionID: p.SessionID, Owner: owner}, nil
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
	Profile        string   `json:"profile,omitempty" jsonschema:"Capability profile(s) of the session, comma-separated (default: every enabled profile)." doc:"Capability profile(s) of the session, comma-separated (default: every enabled profile)."`
	AllowedImports []string `json:"allowed_imports,omitempty" jsonschema:"Narrow the importable modules to this list." doc:"Narrow the importable modules to this list."`
	MemoryLimit    string   `json:"memory_limit,omitempty" jsonschema:"Memory limit of the session's interpreter, such as 512m." doc:"Memory limit of the session's interpreter, such as 512m."`
	UseContainer   bool     `json:"use_container,omitempty" jsonschema:"Run the session under the gVisor backend (only where the operator enabled container mode)." doc:"Run the session under the gVisor backend (only where the operator enabled container mode)."`
}

// Request checks the parameters and turns them into a service.SessionRequest.
func (p SessionParams) Request(owner string) (service.SessionRequest, error) {
	mem, err := ParseMemory(p.MemoryLimit)
	if err != nil {
		return service.SessionRequest{}, err
	}
	return service.SessionRequest{Owner: owner, Profiles: SplitProfiles(p.Profile), AllowedImports: p.AllowedImports, MemoryBytes: mem, UseContainer: p.UseContainer}, nil
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
