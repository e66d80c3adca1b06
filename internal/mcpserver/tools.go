package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

type tools struct {
	svc *service.Service
	cfg config.Config // the operator's, which the tools' descriptions quote
	// key, when set, is the API key of every request this server gets
	// (a legacy SSE connection, whose tool calls carry no token of their
	// own; the HTTP front door checked it when the connection opened).
	key string
}

// ExecuteInput are execute_code's arguments (shared with POST /execute).
type ExecuteInput = api.ExecuteParams

// ExecuteOutput is execute_code's structured result: the service's one
// Result, the same object as codecage run --json and the REST API return
// (its schema is inferred from it, so a new field reaches MCP too), except
// that the figures are counted here and sent as image content.
type ExecuteOutput struct {
	service.Result
	Images int `json:"images" jsonschema:"Number of figures returned as image content."`
}

func (t *tools) register(s *mcp.Server) {
	c := t.cfg
	addTool(s, &mcp.Tool{
		Name:         "execute_code",
		Title:        "Run Python code in a sandbox",
		InputSchema:  executeInputSchema(c),
		OutputSchema: executeOutputSchema(),
		Description: fmt.Sprintf(`Runs Python 3 code in a fresh, isolated sandbox and returns its stdout, stderr and the value of its last expression.
Limits by default: %gs wall clock, %s memory, %d processes, %d bytes of output per stream; no network (unless the network profile is enabled, and then only allowed hosts through a proxy); only /workspace and /tmp are writable.
Without session_id nothing persists: every call starts from scratch. With session_id (see create_session) variables, imports and /workspace files persist.
Imports are limited by profile; without profile, code may import the modules of %s. basic has the standard library's computation and text modules (math, sys, re, json, datetime, collections, typing, itertools, ...); data_science adds numpy, pandas, scipy, matplotlib, sklearn (figures left open are returned as images); filesystem adds os, pathlib, shutil; network adds urllib.request, requests and http.client through the egress proxy. An ImportError says which profile would allow a module.`,
			c.Timeout.Seconds(), humanSize(c.MemoryLimit), c.MaxProcesses, c.OutputSize, strings.Join(c.DefaultProfileSet(), ", ")),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(c.EnableNetwork)},
	}, t.execute)

	addTool(s, &mcp.Tool{
		Name:        "validate_code",
		Title:       "Check Python code without running it",
		Description: "Parses the code (in a sandbox) and reports syntax errors with line and column, imports the profile would refuse (and which profile allows them), dynamic features worth a look, and a complexity estimate. Nothing runs.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.validate)

	allowed, _ := t.svc.CommandsInfo()
	addTool(s, &mcp.Tool{
		Name:  "run_command",
		Title: "Run a shell command in a sandbox",
		Description: fmt.Sprintf(`Runs a command line under /bin/sh -c (pipes, redirects and globs work) in a sandbox: a session's workspace with session_id, else a fresh empty one. Only these programs exist there: %s (anything else is "not allowed"). No network; only the workspace and /tmp are writable. Default timeout %gs, at most %gs.`,
			strings.Join(allowed, " "), c.CommandTimeout.Seconds(), c.MaxCommandTime.Seconds()),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)},
	}, t.runCommand)

	source := c.PipIndexURL
	if c.PipFindLinks != "" {
		source = "the operator's wheelhouse"
	}
	addTool(s, &mcp.Tool{
		Name:        "pip_install",
		Title:       "Install a Python package into a session",
		Description: fmt.Sprintf("Installs a package (wheels only; dependencies included) from %s into a session's own package directory: that session's later execute_code calls can import it, other sessions cannot. Blocked names are refused; names that look like a popular package's typo come with a warning. Returns the installed version, or why it failed (not_found, no_wheel, too_large, conflict, blocked, timeout).", source),
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(c.PipFindLinks == "")},
	}, t.pipInstall)

	addTool(s, &mcp.Tool{
		Name:  "list_code_tools",
		Title: "Tools code can call",
		Description: "Lists the other MCP servers' tools that code run by execute_code can call as tools.<server>.<tool>(...) (or tools.call(\"server.tool\", {...})), with their Python signatures and docstrings. " +
			"Calling tools from code and printing only what matters saves a round trip and context per call; a failed call raises ToolError. execute_code's tools argument narrows a run to some of them.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.listCodeTools)

	addTool(s, &mcp.Tool{
		Name:        "get_sandbox_info",
		Title:       "Sandbox capabilities and limits",
		Description: "Returns the security profiles (enabled or not, with their modules), the resource limits and their maximums, container mode, network egress, and the isolation layers in force on this host.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.info)

	addTool(s, &mcp.Tool{
		Name:        "create_session",
		Title:       "Open a persistent Python session",
		InputSchema: sessionInputSchema(),
		Description: fmt.Sprintf("Starts an interpreter that keeps variables, imports and functions between execute_code calls (pass its session_id), with a /workspace directory for files (write_file, read_file, list_files). A failing call does not end it; a timeout or out-of-memory does (restart_session then keeps the files). Closed after %s idle or %s in all; at most %d at once. from_snapshot starts it from a snapshot (snapshot_session); on_timeout pause pauses it at the end of its life instead of closing it.",
			c.SessionIdleTTL, c.SessionMaxLifetime, c.MaxSessions),
	}, t.createSession)
	addTool(s, &mcp.Tool{Name: "close_session", Title: "Close a session", Description: "Ends a session, its interpreter and its workspace files.", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, t.closeSession)
	addTool(s, &mcp.Tool{Name: "restart_session", Title: "Restart a session", Description: "Starts a fresh interpreter for a session (its variables are lost), keeping its workspace files. Use it after a timeout or out-of-memory ended the session."}, t.restartSession)
	addTool(s, &mcp.Tool{Name: "list_sessions", Title: "List sessions", Description: "Lists your open sessions with their profiles, use and expiry.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listSessions)
	addTool(s, &mcp.Tool{Name: "session_metrics", Title: "What a session uses now", Description: "Samples a session's CPU (percent of its bandwidth since the previous sample), memory (bytes, against its limit) and disk (bytes its workspace holds, against its size limit).", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.sessionMetrics)
	t.registerLogs(s)
	t.registerNetwork(s)
	t.registerSecrets(s)
	t.registerPersist(s)

	addTool(s, &mcp.Tool{Name: "write_file", Title: "Write a file into a session", InputSchema: writeFileInputSchema(),
		Description: fmt.Sprintf("Writes a file into the session's /workspace (the code then opens it by relative path or /workspace/...) or its /tmp, with optional metadata (kept with the file, listed by list_files). Parent directories are created. The read-only system tree (/usr, /etc, ...) is permission denied. At most %d bytes per file and %d per workspace.", c.MaxFileSize, c.WorkspaceMax)}, t.writeFile)
	addTool(s, &mcp.Tool{Name: "read_file", Title: "Read a file of a session", Description: "Returns a file of the session's filesystem as its code sees it (/workspace, /tmp, or the read-only system tree such as /usr/lib/os-release), as UTF-8 text or base64 for binary files.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.readFile)
	addTool(s, &mcp.Tool{Name: "list_files", Title: "List a session's files", Description: fmt.Sprintf("Lists files and directories of the session's /workspace (default), /tmp or system tree, with sizes, modes and metadata: at most %d entries, %d levels deep; truncated says when there was more.", service.MaxListedFiles, service.MaxListDepth), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listFiles)
	addTool(s, &mcp.Tool{Name: "delete_file", Title: "Delete a file of a session", Description: "Deletes a file or directory tree of the session's /workspace or /tmp (the read-only system tree is permission denied).", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, t.deleteFile)
}

func ptr[T any](v T) *T { return &v }

// executeInputSchema adds bounds to the inferred schema. Profiles and
// memory sizes are checked by the service, whose errors say what would
// work (a pattern failure would not).
func executeInputSchema(c config.Config) *jsonschema.Schema {
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
	s.Properties["encoding"].Enum = api.FileEncodings
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
	// Inference leaves out a json.RawMessage field: it is required all
	// the same, where Result has it (after stderr).
	if i := slices.Index(s.Required, "stderr"); i >= 0 && !slices.Contains(s.Required, "result") {
		s.Required = slices.Insert(s.Required, i+1, "result")
	}
	return s
}

// owner is who the caller is, for sessions and files: the API key when the
// server has keys (sessions then belong to the key, whatever the surface),
// else the MCP session (each HTTP client connection has its own; stdio has
// one client), which keeps one client out of another's sessions.
func (t *tools) owner(req *mcp.CallToolRequest) string {
	key, conn := t.key, ""
	if req != nil {
		if ex := req.Extra; key == "" && ex != nil && ex.TokenInfo != nil {
			key = ex.TokenInfo.UserID
		}
		if req.Session != nil {
			conn = "mcp:" + req.Session.ID()
		}
	}
	return api.Owner(key, conn)
}

// caller tells the service who asks and through which transport.
func (t *tools) caller(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	c := service.Caller{Surface: service.SurfaceMCPStdio, Key: t.key}
	if t.key != "" {
		c.Surface = service.SurfaceMCP
	}
	if req != nil && req.Extra != nil {
		if req.Extra.Header != nil {
			c.Surface = service.SurfaceMCP
		}
		if ti := req.Extra.TokenInfo; ti != nil {
			c.Key = ti.UserID
		}
	}
	return service.WithCaller(ctx, c)
}

func (t *tools) execute(ctx context.Context, req *mcp.CallToolRequest, in ExecuteInput) (*mcp.CallToolResult, ExecuteOutput, error) {
	r, err := in.Request(t.cfg.MaxTimeout, t.owner(req))
	if err != nil {
		return nil, ExecuteOutput{}, toolError(err)
	}
	r.OnOutput = progress(ctx, req)
	res, err := t.svc.Execute(t.caller(ctx, req), r)
	if err != nil {
		return nil, ExecuteOutput{}, toolError(err)
	}
	out := ExecuteOutput{Result: *res, Images: len(res.Images)}
	out.Result.Images = nil // shadowed by the count: the figures go as image content
	result := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary(res)}}, IsError: !res.Success}
	for _, img := range res.Images {
		raw, err := base64.StdEncoding.DecodeString(img.Data)
		if err == nil {
			result.Content = append(result.Content, &mcp.ImageContent{MIMEType: img.MIMEType, Data: raw})
		}
	}
	// A rich result's PNGs go as image content too; the rest of its
	// representations (text, HTML, charts, DataFrames) stay structured.
	rich := richImages(&out.Result)
	out.Images += len(rich)
	result.Content = append(result.Content, rich...)
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
func summary(r *service.Result) string {
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
	if len(r.Outputs) > 0 {
		b.WriteString(fmt.Sprintf("[%d display output(s) in the structured result's outputs]\n", len(r.Outputs)))
		for _, o := range r.Outputs {
			if t, ok := o.Data["text/plain"]; ok {
				b.WriteString("[display] " + capText(t, maxSummaryText) + "\n")
			}
		}
	}
	if b.Len() == 0 {
		b.WriteString("[no output]\n")
	}
	return b.String()
}

// maxSummaryText bounds each display output's text in the summary (the
// structured result has all of it).
const maxSummaryText = 2000

// capText is s cut to at most n bytes, on a rune boundary, marked when cut.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// InstallInput are pip_install's arguments (shared with POST /pip_install).
type InstallInput = api.InstallParams

func (t *tools) pipInstall(ctx context.Context, req *mcp.CallToolRequest, in InstallInput) (*mcp.CallToolResult, *service.InstallResult, error) {
	res, err := t.svc.PipInstall(t.caller(ctx, req), in.Request(t.owner(req)))
	if err != nil {
		return nil, nil, toolError(err)
	}
	text := res.Message
	for _, w := range res.Warnings {
		text += "\nwarning: " + w
	}
	if !res.Success && res.Log != "" {
		text += "\n[pip log]\n" + res.Log
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: !res.Success}, res, nil
}

// CodeToolList is list_code_tools' result.
type CodeToolList struct {
	Tools   []service.CodeTool   `json:"tools"`
	Servers []service.CodeServer `json:"servers"`
}

func (t *tools) listCodeTools(ctx context.Context, req *mcp.CallToolRequest, _ NoInput) (*mcp.CallToolResult, CodeToolList, error) {
	list, servers, err := t.svc.CodeTools(ctx)
	if err != nil {
		return nil, CodeToolList{}, toolError(err)
	}
	var b strings.Builder
	if len(list) == 0 {
		b.WriteString("No upstream tools are configured (SANDBOX_TOOLS_CONFIG).\n")
	}
	for _, ct := range list {
		b.WriteString("# tools." + ct.Name + "\n" + ct.Signature + "\n\n")
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, CodeToolList{Tools: list, Servers: servers}, nil
}

// CommandInput are run_command's arguments (shared with POST /commands).
type CommandInput = api.CommandParams

func (t *tools) runCommand(ctx context.Context, req *mcp.CallToolRequest, in CommandInput) (*mcp.CallToolResult, *service.CommandResult, error) {
	r, err := in.Request(t.owner(req))
	if err != nil {
		return nil, nil, toolError(err)
	}
	r.OnOutput = progress(ctx, req)
	res, err := t.svc.RunCommand(t.caller(ctx, req), r)
	if err != nil {
		return nil, nil, toolError(err)
	}
	var b strings.Builder
	b.WriteString(res.Stdout)
	if res.Stderr != "" {
		b.WriteString("[stderr]\n" + res.Stderr)
	}
	if res.Error != nil {
		b.WriteString("[error] " + *res.Error + "\n")
	}
	fmt.Fprintf(&b, "[exit %d]\n", res.ExitCode)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}, IsError: !res.Success}, res, nil
}

// ValidateInput are validate_code's arguments (shared with POST /validate).
type ValidateInput = api.ValidateParams

func (t *tools) validate(ctx context.Context, req *mcp.CallToolRequest, in ValidateInput) (*mcp.CallToolResult, *service.Validation, error) {
	v, err := t.svc.Validate(t.caller(ctx, req), in.Request())
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, v, nil
}

// NoInput is the argument object of tools that take none.
type NoInput struct{}

func (t *tools) info(ctx context.Context, req *mcp.CallToolRequest, _ NoInput) (*mcp.CallToolResult, service.Info, error) {
	return nil, t.svc.Info(), nil
}

// SessionInput opens a session (shared with POST /sessions).
type SessionInput = api.SessionParams

func (t *tools) createSession(ctx context.Context, req *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, *service.SessionInfo, error) {
	r, err := in.Request(t.owner(req))
	if err != nil {
		return nil, nil, toolError(err)
	}
	info, err := t.svc.CreateSession(t.caller(ctx, req), r)
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
	if err := t.svc.CloseSession(t.caller(ctx, req), in.SessionID, t.owner(req)); err != nil {
		return nil, Done{}, toolError(err)
	}
	return nil, Done{true}, nil
}

func (t *tools) restartSession(ctx context.Context, req *mcp.CallToolRequest, in SessionIDInput) (*mcp.CallToolResult, *service.SessionInfo, error) {
	info, err := t.svc.RestartSession(t.caller(ctx, req), in.SessionID, t.owner(req))
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, info, nil
}

func (t *tools) sessionMetrics(ctx context.Context, req *mcp.CallToolRequest, in SessionIDInput) (*mcp.CallToolResult, *service.SessionMetrics, error) {
	m, err := t.svc.SessionMetrics(t.caller(ctx, req), in.SessionID, t.owner(req))
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, m, nil
}

// SessionList is list_sessions' result.
type SessionList struct {
	Sessions []service.SessionInfo `json:"sessions"`
}

func (t *tools) listSessions(ctx context.Context, req *mcp.CallToolRequest, _ NoInput) (*mcp.CallToolResult, SessionList, error) {
	return nil, SessionList{Sessions: t.svc.ListSessions(ctx, t.owner(req))}, nil
}

// WriteFileInput writes a file of a session.
type WriteFileInput struct {
	SessionID string            `json:"session_id" jsonschema:"The session whose filesystem to write."`
	Path      string            `json:"path" jsonschema:"Relative to the workspace (data.csv), or absolute under /workspace or /tmp."`
	Content   string            `json:"content" jsonschema:"The file's content: text, or base64 when encoding is base64."`
	Encoding  string            `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64."`
	Metadata  map[string]string `json:"metadata,omitempty" jsonschema:"The file's metadata, replacing what it had: keys are HTTP tokens (lowercased), values printable ASCII; at most 32 keys and 16 KiB together. The code sees it as user.e2b.<key> extended attributes."`
}

func (t *tools) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteFileInput) (*mcp.CallToolResult, *service.FileInfo, error) {
	data, err := api.DecodeContent(in.Content, in.Encoding)
	if err != nil {
		return nil, nil, toolError(err)
	}
	fi, err := t.svc.WriteFileWith(t.caller(ctx, req), in.SessionID, t.owner(req), in.Path, data, in.Metadata)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, fi, nil
}

// PathInput names a path of a session's filesystem.
type PathInput struct {
	SessionID string `json:"session_id" jsonschema:"The session whose filesystem to reach."`
	Path      string `json:"path,omitempty" jsonschema:"Relative to the workspace (data.csv), or absolute: under /workspace, /tmp, or the read-only system tree (/usr, /etc, ...). list_files: default, the whole workspace."`
}

// FileContent is read_file's result.
type FileContent = service.FileContent

func (t *tools) readFile(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, FileContent, error) {
	data, err := t.svc.ReadFile(t.caller(ctx, req), in.SessionID, t.owner(req), in.Path)
	if err != nil {
		return nil, FileContent{}, toolError(err)
	}
	return nil, service.EncodeContent(in.Path, data), nil
}

// FileList is list_files' result.
type FileList struct {
	Files []service.FileInfo `json:"files"`
	// Truncated: the listing stopped at one of its bounds.
	Truncated bool `json:"truncated" jsonschema:"The listing stopped at one of its bounds (entries, depth or bytes of paths): files is only part of the tree."`
}

func (t *tools) listFiles(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, FileList, error) {
	files, err := t.svc.ListFiles(t.caller(ctx, req), in.SessionID, t.owner(req), in.Path)
	if err != nil {
		return nil, FileList{}, toolError(err)
	}
	return nil, FileList{Files: files.Files, Truncated: files.Truncated}, nil
}

func (t *tools) deleteFile(ctx context.Context, req *mcp.CallToolRequest, in PathInput) (*mcp.CallToolResult, Done, error) {
	if err := t.svc.DeleteFile(t.caller(ctx, req), in.SessionID, t.owner(req), in.Path); err != nil {
		return nil, Done{}, toolError(err)
	}
	return nil, Done{true}, nil
}
