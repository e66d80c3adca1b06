package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// The tools of sessions that outlive their sandbox (issue #26): pause and
// resume, snapshots, forks. Their arguments are api's params (shared with
// REST, checked once there); their results the service's types.

// PauseInput are pause_session's arguments.
type PauseInput struct {
	SessionID string `json:"session_id" jsonschema:"The session to pause, from create_session."`
	api.PauseParams
}

// SnapshotInput are snapshot_session's arguments.
type SnapshotInput struct {
	SessionID string `json:"session_id" jsonschema:"The session to snapshot, from create_session."`
	api.SnapshotParams
}

// ForkInput are fork_session's arguments.
type ForkInput struct {
	SessionID string `json:"session_id" jsonschema:"The session to fork, from create_session."`
	api.ForkParams
}

// SnapshotIDInput names a snapshot.
type SnapshotIDInput struct {
	SnapshotID string `json:"snapshot_id" jsonschema:"The snapshot's id, from snapshot_session or list_snapshots."`
}

// ForkList is fork_session's result: the copies, in order.
type ForkList struct {
	Sessions []service.ForkResult `json:"sessions"`
}

// SnapshotList is list_snapshots' result.
type SnapshotList struct {
	Snapshots []service.SnapshotInfo `json:"snapshots"`
}

func (t *tools) registerPersist(s *mcp.Server) {
	addTool(s, &mcp.Tool{Name: "pause_session", Title: "Pause a session", InputSchema: pauseInputSchema(),
		Description: "Pauses a session: its code stops and uses no CPU. With keep_memory (the default) its variables are kept and a resume goes on where it stood; keep_memory false keeps only its workspace files and frees its sandbox. A session with auto_resume (the default) is resumed by its next execute_code or file call; others by resume_session."}, t.pauseSession)
	addTool(s, &mcp.Tool{Name: "resume_session", Title: "Resume a paused session",
		Description: "Makes a paused session run again with its variables and files; a running session is left as it is. Returns the session, its state running.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false)}}, t.resumeSession)
	addTool(s, &mcp.Tool{Name: "snapshot_session", Title: "Snapshot a session",
		Description: "Saves a persistent copy of a session (its workspace files and its variables), which keeps running. create_session with from_snapshot starts new sessions from it, any number of times. not_saved names what could not be saved (such as generators, sockets, threads).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)}}, t.snapshotSession)
	addTool(s, &mcp.Tool{Name: "fork_session", Title: "Fork a session into live copies", InputSchema: forkInputSchema(),
		Description: fmt.Sprintf("Makes count live copies of a session now (1 to %d), each a new session with its own copy of the workspace and the variables, diverging independently; the session goes on. Each entry is a copy's session, or the error that kept it from starting.", service.MaxForks),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)}}, t.forkSession)
	addTool(s, &mcp.Tool{Name: "list_snapshots", Title: "List snapshots", Description: "Lists your snapshots, newest first, with their sizes and expiry; session_id and name narrow the list.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listSnapshots)
	addTool(s, &mcp.Tool{Name: "delete_snapshot", Title: "Delete a snapshot", Description: "Deletes one of your snapshots; sessions started from it are not affected.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, t.deleteSnapshot)
}

// pauseInputSchema gives keep_memory its type and default (inference makes
// a pointer nullable, which says nothing of what null would mean).
func pauseInputSchema() *jsonschema.Schema {
	s := inferSchema[PauseInput]()
	optionalBool(s.Properties["keep_memory"], true)
	return s
}

// forkInputSchema bounds count and lifetime, as api.ForkParams checks.
func forkInputSchema() *jsonschema.Schema {
	s := inferSchema[ForkInput]()
	c := s.Properties["count"]
	c.Type, c.Types = "integer", nil
	c.Minimum, c.Maximum, c.Default = ptr(1.0), ptr(float64(service.MaxForks)), json.RawMessage("1")
	s.Properties["lifetime"].Minimum = ptr(0.0)
	return s
}

// sessionInputSchema names on_timeout's values and auto_resume's default.
func sessionInputSchema() *jsonschema.Schema {
	s := inferSchema[SessionInput]()
	s.Properties["on_timeout"].Enum = api.OnTimeouts
	optionalBool(s.Properties["auto_resume"], true)
	return s
}

func inferSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err)
	}
	return s
}

// optionalBool makes a *bool's schema a boolean with a default.
func optionalBool(s *jsonschema.Schema, def bool) {
	s.Type, s.Types = "boolean", nil
	s.Default, _ = json.Marshal(def)
}

func (t *tools) pauseSession(ctx context.Context, req *mcp.CallToolRequest, in PauseInput) (*mcp.CallToolResult, *service.SessionInfo, error) {
	info, err := t.svc.PauseSession(t.caller(ctx, req), in.SessionID, t.owner(req), in.Mode())
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, info, nil
}

func (t *tools) resumeSession(ctx context.Context, req *mcp.CallToolRequest, in SessionIDInput) (*mcp.CallToolResult, *service.SessionInfo, error) {
	info, _, err := t.svc.ResumeSession(t.caller(ctx, req), in.SessionID, t.owner(req))
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, info, nil
}

func (t *tools) snapshotSession(ctx context.Context, req *mcp.CallToolRequest, in SnapshotInput) (*mcp.CallToolResult, *service.SnapshotInfo, error) {
	name, err := in.Check()
	if err != nil {
		return nil, nil, toolError(err)
	}
	snap, err := t.svc.SnapshotSession(t.caller(ctx, req), in.SessionID, t.owner(req), name)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, snap, nil
}

func (t *tools) forkSession(ctx context.Context, req *mcp.CallToolRequest, in ForkInput) (*mcp.CallToolResult, ForkList, error) {
	count, lifetime, err := in.Fork()
	if err != nil {
		return nil, ForkList{}, toolError(err)
	}
	res, err := t.svc.ForkSession(t.caller(ctx, req), in.SessionID, t.owner(req), count, lifetime)
	if err != nil {
		return nil, ForkList{}, toolError(err)
	}
	return nil, ForkList{Sessions: res}, nil
}

func (t *tools) listSnapshots(ctx context.Context, req *mcp.CallToolRequest, in api.SnapshotQuery) (*mcp.CallToolResult, SnapshotList, error) {
	list, err := t.svc.ListSnapshots(t.caller(ctx, req), t.owner(req), in.Filter())
	if err != nil {
		return nil, SnapshotList{}, toolError(err)
	}
	if list == nil {
		list = []service.SnapshotInfo{}
	}
	return nil, SnapshotList{Snapshots: list}, nil
}

func (t *tools) deleteSnapshot(ctx context.Context, req *mcp.CallToolRequest, in SnapshotIDInput) (*mcp.CallToolResult, Done, error) {
	if err := t.svc.DeleteSnapshot(t.caller(ctx, req), t.owner(req), in.SnapshotID); err != nil {
		return nil, Done{}, toolError(err)
	}
	return nil, Done{true}, nil
}
