package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/runtime"
	"github.com/codecage/codecage/internal/sandbox"
)

type tools struct {
	svc *sandbox.Service
}

// ExecuteInput are execute_code's arguments.
type ExecuteInput struct {
	Code           string   `json:"code" jsonschema:"Python 3 source to run. Print what you want to see, or end with an expression: its value is returned as result."`
	Timeout        float64  `json:"timeout,omitempty" jsonschema:"Wall-clock limit in seconds (default 30, at most the server's maximum, usually 300)."`
	Profile        string   `json:"profile,omitempty" jsonschema:"Capability profile(s), comma-separated: basic (default), data_science, network, filesystem. Each must be enabled by the operator (see get_sandbox_info). Ignored with session_id."`
	AllowedImports []string `json:"allowed_imports,omitempty" jsonschema:"Narrow the importable top-level modules to this list (within what the profiles allow)."`
	MemoryLimit    string   `json:"memory_limit,omitempty" jsonschema:"Memory limit such as 256m or 1g (default: the server's, larger for data_science)."`
	SessionID      string   `json:"session_id,omitempty" jsonschema:"Run in this session (from create_session): variables, imports and /workspace files persist between calls."`
	UseContainer   bool     `json:"use_container,omitempty" jsonschema:"Run under the gVisor backend (only where the operator enabled container mode)."`
}

// ExecuteOutput is execute_code's structured result: the same object as
// codecage run --json and the REST API return.
type ExecuteOutput struct {
	Success       bool               `json:"success"`
	ExecutionID   string             `json:"execution_id"`
	Stdout        string             `json:"stdout"`
	Stderr        string             `json:"stderr"`
	Result        any                `json:"result"`
	ResultType    *string            `json:"result_type"`
	Variables     []string           `json:"variables"`
	ExitCode      int                `json:"exit_code"`
	Error         *sandbox.ErrorInfo `json:"error"`
	ExecutionTime float64            `json:"execution_time"`
	TimedOut      bool               `json:"timed_out"`
	OOMKilled     bool               `json:"oom_killed"`
	Truncated     bool               `json:"truncated"`
	Limit         *string            `json:"limit"`
	Resources     sandbox.Resources  `json:"resources"`
	Backend       string             `json:"backend"`
	Images        int                `json:"images" jsonschema:"Number of figures returned as image content."`
}

func (t *tools) register(s *mcp.Server) {
	c := t.svc.Config()
	mcp.AddTool(s, &mcp.Tool{
		Name:         "execute_code",
		Title:        "Run Python code in a sandbox",
		InputSchema:  executeInputSchema(c),
		OutputSchema: executeOutputSchema(),
		Description: fmt.Sprintf(`Runs Python 3 code in a fresh, isolated sandbox and returns its stdout, stderr and the value of its last expression.
Limits by default: %gs wall clock, %s memory, %d processes, %d bytes of output per stream; no network (unless the network profile is enabled, and then only allowed hosts through a proxy); only /workspace and /tmp are writable.
Without session_id nothing persists: every call starts from scratch. With session_id (see create_session) variables, imports and /workspace files persist.
Imports are limited by profile: basic has math, statistics, json, re, datetime, collections and the like; data_science adds numpy, pandas, scipy, matplotlib (figures left open are returned as images); filesystem adds os, pathlib, shutil; network adds urllib.request and http.client. An ImportError says which profile would allow a module.`,
			c.Timeout.Seconds(), humanSize(c.MemoryLimit), c.MaxProcesses, c.OutputSize),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(c.EnableNetwork)},
	}, t.execute)

	mcp.AddTool(s, &mcp.Tool{
		Name:        "validate_code",
		Title:       "Check Python code without running it",
		Description: "Parses the code (in a sandbox) and reports syntax errors with line and column, imports the profile would refuse (and which profile allows them), dynamic features worth a look, and a complexity estimate. Nothing runs.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.validate)

	mcp.AddTool(s, &mcp.Tool{
		Name:        "get_sandbox_info",
		Title:       "Sandbox capabilities and limits",
		Description: "Returns the security profiles (enabled or not, with their modules), the resource limits and their maximums, container mode, network egress, and the isolation layers in force on this host.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.info)

	mcp.AddTool(s, &mcp.Tool{
		Name:  "create_session",
		Title: "Open a persistent Python session",
		Description: fmt.Sprintf("Starts an interpreter that keeps variables, imports and functions between execute_code calls (pass its session_id), with a /workspace directory for files (write_file, read_file, list_files). A failing call does not end it; a timeout or out-of-memory does (restart_session then keeps the files). Closed after %s idle or %s in all; at most %d at once.",
			c.SessionIdleTTL, c.SessionMaxLifetime, c.MaxSessions),
	}, t.createSession)
	mcp.AddTool(s, &mcp.Tool{Name: "close_session", Title: "Close a session", Description: "Ends a session, its interpreter and its workspace files.", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, t.closeSession)
	mcp.AddTool(s, &mcp.Tool{Name: "restart_session", Title: "Restart a session", Description: "Starts a fresh interpreter for a session (its variables are lost), keeping its workspace files. Use it after a timeout or out-of-memory ended the session."}, t.restartSession)
	mcp.AddTool(s, &mcp.Tool{Name: "list_sessions", Title: "List sessions", Description: "Lists your open sessions with their profiles, use and expiry.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listSessions)

	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Title: "Write a file into a session's workspace", InputSchema: writeFileInputSchema(),
		Description: fmt.Sprintf("Writes a file under the session's /workspace (the code then opens it by relative path or /workspace/...). Parent directories are created. At most %d bytes per file and %d per workspace.", c.MaxFileSize, c.WorkspaceMax)}, t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Title: "Read a file from a session's workspace", Description: "Returns a file the code wrote under /workspace, as UTF-8 text or base64 for binary files.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Title: "List a session's workspace", Description: "Lists files and directories under the session's /workspace (or a subdirectory) with sizes.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_file", Title: "Delete from a session's workspace", Description: "Deletes a file or directory tree under the session's /workspace.", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, t.deleteFile)
}

func ptr[T any](v T) *T { return &v }

// executeInputSchema adds bounds to the inferred schema. Profiles and
// memory sizes are checked by the service, whose errors say what would
// work (a pattern failure would not).
func executeInputSchema(c policy.Config) *jsonschema.Schema {
	s, err := jsonschema.For[ExecuteInput](nil)
	if err != nil {
		panic(err)
	}
	s.Properties["timeout"].Minimum = ptr(0.0)
	s.Properties["timeout"].Maximum = ptr(c.MaxTimeout.Seconds())
	s.Properties["code"].MaxLength = ptr(int(c.MaxCodeSize))
	return s
}

// writeFileInputSchema names the encodings.
func writeFileInputSchema() *jsonschema.Schema {
	s, err := jsonschema.For[WriteFileInput](nil)
	if err != nil {
		panic(err)
	}
	s.Properties["encoding"].Enum = []any{"utf-8", "base64"}
	return s
}

// executeOutputSchema is the schema inferred from ExecuteOutput, with the
// result (any JSON value) described by an object schema: clients reject
// the boolean schema "true" that inference gives an interface field.
func executeOutputSchema() *jsonschema.Schema {
	s, err := jsonschema.For[ExecuteOutput](nil)
	if err != nil {
		panic(err)
	}
	s.Properties["result"] = &jsonschema.Schema{Description: "The value of the code's last expression: the value itself when it is JSON, else its repr as a string; null when there is none."}
	return s
}

// owner is who the caller is, for sessions and files: the MCP session
// (each HTTP client connection has its own; stdio has one client). Until
// API keys exist this is what keeps one client out of another's sessions.
func owner(req *mcp.CallToolRequest) string {
	if req == nil || req.Session == nil {
		return ""
	}
	return "mcp:" + req.Session.ID()
}

func profiles(p string) []string {
	var out []string
	for _, s := range strings.Split(p, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func memory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := policy.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("invalid request: memory_limit %q: %v", s, err)
	}
	return n, nil
}

func (t *tools) execute(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
	if in.UseContainer && !t.svc.Config().EnableContainerMode {
		return nil, ExecuteOutput{}, errors.New("invalid request: use_container needs container mode, which this server does not enable (SANDBOX_ENABLE_CONTAINER_MODE=true)")
	}
	if in.UseContainer {
		return nil, ExecuteOutput{}, errors.New("the gVisor backend is not available in this version; run without use_container")
	}
	if in.Timeout < 0 || in.Timeout > 86400 {
		return nil, ExecuteOutput{}, fmt.Errorf("invalid request: timeout %g is out of range", in.Timeout)
	}
	mem, err := memory(in.MemoryLimit)
	if err != nil {
		return nil, ExecuteOutput{}, err
	}
	res, err := t.svc.Execute(ctx, sandbox.Request{
		OnOutput:       progress(ctx, req),
		Code:           in.Code,
		Timeout:        time.Duration(in.Timeout * float64(time.Second)),
		MemoryBytes:    mem,
		Profiles:       profiles(in.Profile),
		AllowedImports: in.AllowedImports,
		SessionID:      in.SessionID,
		Owner:          owner(req),
	})
	if err != nil {
		return nil, ExecuteOutput{}, toolError(err)
	}
	out := ExecuteOutput{
		Success: res.Success, ExecutionID: res.ExecutionID, Stdout: res.Stdout, Stderr: res.Stderr,
		ResultType: res.ResultType, Variables: res.Variables, ExitCode: res.ExitCode, Error: res.Error,
		ExecutionTime: res.ExecutionTime, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled, Truncated: res.Truncated,
		Limit: res.Limit, Resources: res.Resources, Backend: res.Backend, Images: len(res.Images),
	}
	_ = json.Unmarshal(res.Result, &out.Result)
	result := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary(res)}}, IsError: !res.Success}
	for _, img := range res.Images {
		raw, err := base64.StdEncoding.DecodeString(img.Data)
		if err == nil {
			result.Content = append(result.Content, &mcp.ImageContent{MIMEType: img.MIMEType, Data: raw})
		}
	}
	return result, out, nil
}

// progress streams output lines as progress notifications when the client
// asked for progress (gave a token).
func progress(ctx context.Context, req *mcp.CallToolRequest) func(stream, line string) {
	if req == nil || req.Params == nil || req.Session == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	var n float64
	return func(stream, line string) {
		n++
		msg := line
		if stream == "stderr" {
			msg = "[stderr] " + line
		}
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
	}
}

// summary is the text a model reads: output first, then the result or
// what went wrong.
func summary(r *sandbox.Result) string {
	var b strings.Builder
	if r.Stdout != "" {
		b.WriteString(r.Stdout)
		if !strings.HasSuffix(r.Stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if r.Stderr != "" {
		b.WriteString("[stderr]\n" + r.Stderr)
		if !strings.HasSuffix(r.Stderr, "\n") {
			b.WriteString("\n")
		}
	}
	if len(r.Result) > 0 && string(r.Result) != "null" {
		var s string
		if json.Unmarshal(r.Result, &s) == nil && r.ResultType != nil && *r.ResultType != "str" {
			b.WriteString("[result] " + s + "\n") // a repr
		} else {
			b.WriteString("[result] " + string(r.Result) + "\n")
		}
	}
	if r.Truncated {
		b.WriteString("[output truncated at the output limit]\n")
	}
	if e := r.Error; e != nil {
		if e.Traceback != "" {
			b.WriteString("[error]\n" + e.Traceback)
		} else {
			b.WriteString(fmt.Sprintf("[error] %s: %s\n", e.Type, e.Message))
		}
	}
	if len(r.Images) > 0 {
		b.WriteString(fmt.Sprintf("[%d figure(s) attached as images]\n", len(r.Images)))
	}
	if b.Len() == 0 {
		b.WriteString("[no output]\n")
	}
	return b.String()
}

// ValidateInput are validate_code's arguments.
type ValidateInput struct {
	Code           string   `json:"code" jsonschema:"Python 3 source to check."`
	Profile        string   `json:"profile,omitempty" jsonschema:"Profile(s) to check the imports against, comma-separated (default basic)."`
	AllowedImports []string `json:"allowed_imports,omitempty" jsonschema:"Check against this import list instead."`
}

func (t *tools) validate(ctx context.Context, req *mcp.CallToolRequest, in ValidateInput) (*mcp.CallToolResult, *runtime.Validation, error) {
	v, err := t.svc.Validate(ctx, sandbox.ValidateRequest{Code: in.Code, Profiles: profiles(in.Profile), AllowedImports: in.AllowedImports})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, v, nil
}

// NoInput is the argument object of tools that take none.
type NoInput struct{}

func (t *tools) info(ctx context.Context, req *mcp.CallToolRequest, _ NoInput) (*mcp.CallToolResult, sandbox.Info, error) {
	return nil, t.svc.Info(), nil
}

// SessionInput opens a session.
type SessionInput struct {
	Profile        string   `json:"profile,omitempty" jsonschema:"Capability profile(s) of the session, comma-separated (default basic)."`
	AllowedImports []string `json:"allowed_imports,omitempty" jsonschema:"Narrow the importable modules to this list."`
	MemoryLimit    string   `json:"memory_limit,omitempty" jsonschema:"Memory limit of the session's interpreter, such as 512m."`
}

func (t *tools) createSession(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, *sandbox.SessionInfo, error) {
	mem, err := memory(in.MemoryLimit)
	if err != nil {
		return nil, nil, err
	}
	info, err := t.svc.CreateSession(ctx, sandbox.SessionRequest{Owner: owner(req), Profiles: profiles(in.Profile), AllowedImports: in.AllowedImports, MemoryBytes: mem})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, info, nil
}

// SessionIDInput names a session.
type SessionIDInput struct {
	SessionID string `json:"session_id" jsonschema:"The session's id, from create_session."`
}

// Done reports that an operation took place.
type Done struct {
	Done bool `json:"done"`
}

func (t *tools) closeSession(ctx context.Context, req *mcp.CallToolRequest, in SessionIDInput) (*mcp.CallToolResult, Done, error) {
	if err := t.svc.CloseSession(in.SessionID, owner(req)); err != nil {
		return nil, Done{}, toolError(err)
	}
	return nil, Done{true}, nil
}

func (t *tools) restartSession(ctx context.Context, req *mcp.CallToolRequest, in SessionIDInput) (*mcp.CallToolResult, *sandbox.SessionInfo, error) {
	info, err := t.svc.RestartSession(ctx, in.SessionID, owner(req))
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, info, nil
}

// SessionList is list_sessions' result.
type SessionList struct {
	Sessions []sandbox.SessionInfo `json:"sessions"`
}

func (t *tools) listSessions(ctx context.Context, req *mcp.CallToolRequest, _ NoInput) (*mcp.CallToolResult, SessionList, error) {
	return nil, SessionList{Sessions: t.svc.ListSessions(owner(req))}, nil
}

// WriteFileInput writes a workspace file.
type WriteFileInput struct {
	SessionID string `json:"session_id" jsonschema:"The session whose workspace to write."`
	Path      string `json:"path" jsonschema:"Path under /workspace, such as data.csv or /workspace/in/data.csv."`
	Content   string `json:"content" jsonschema:"The file's content: text, or base64 when encoding is base64."`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64."`
}

func (t *tools) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteFileInput) (*mcp.CallToolResult, *sandbox.FileInfo, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, nil, fmt.Errorf("invalid request: content is not base64: %v", err)
		}
	default:
		return nil, nil, fmt.Errorf("invalid request: encoding %q (want utf-8 or base64)", in.Encoding)
	}
	fi, err := t.svc.WriteFile(in.SessionID, owner(req), in.Path, data)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, fi, nil
}

// PathInput names a workspace path.
type PathInput struct {
	SessionID string `json:"session_id" jsonschema:"The session whose workspace to read."`
	Path      string `json:"path,omitempty" jsonschema:"Path under /workspace (list_files: default, the whole workspace)."`
}

// FileContent is read_file's result.
type FileContent struct {
	Path     string `json:"path"`
	Size     int    `json:"size"`
	Encoding string `json:"encoding"`
	Content  string `json:"content"`
}

func (t *tools) readFile(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, FileContent, error) {
	data, err := t.svc.ReadFile(in.SessionID, owner(req), in.Path)
	if err != nil {
		return nil, FileContent{}, toolError(err)
	}
	out := FileContent{Path: in.Path, Size: len(data), Encoding: "utf-8", Content: string(data)}
	if !utf8.Valid(data) {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(data)
	}
	return nil, out, nil
}

// FileList is list_files' result.
type FileList struct {
	Files []sandbox.FileInfo `json:"files"`
}

func (t *tools) listFiles(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, FileList, error) {
	files, err := t.svc.ListFiles(in.SessionID, owner(req), in.Path)
	if err != nil {
		return nil, FileList{}, toolError(err)
	}
	return nil, FileList{Files: files}, nil
}

func (t *tools) deleteFile(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, Done, error) {
	if err := t.svc.DeleteFile(in.SessionID, owner(req), in.Path); err != nil {
		return nil, Done{}, toolError(err)
	}
	return nil, Done{true}, nil
}
