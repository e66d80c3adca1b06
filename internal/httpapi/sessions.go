package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// SessionIDInput names a session in the path.
type SessionIDInput struct {
	ID string `path:"id" doc:"The session's id."`
}

// CreateSessionInput is POST /sessions.
type CreateSessionInput struct {
	Body api.SessionParams
}

// SessionOutput is a session's description.
type SessionOutput struct {
	Status int
	Body   *service.SessionInfo
}

// SessionListOutput is GET /sessions.
type SessionListOutput struct {
	Body struct {
		Sessions []service.SessionInfo `json:"sessions"`
	}
}

// FilePathInput names a path of a session's filesystem.
type FilePathInput struct {
	ID   string `path:"id" doc:"The session's id."`
	Path string `query:"path" doc:"A path as the session's code sees it: relative to the workspace (data.csv), or absolute: under /workspace, under /tmp (shared by the session's code and commands), or in the sandbox's read-only system tree (/usr, /etc, ...; writing there is permission denied). Listing: default, the whole workspace."`
}

// WriteFileInput is PUT /sessions/{id}/files/content.
type WriteFileInput struct {
	ID   string `path:"id" doc:"The session's id."`
	Body struct {
		Path     string            `json:"path" doc:"Where to write: relative to the workspace (data.csv), or absolute under /workspace or /tmp (the read-only system tree is permission denied, 403). Parent directories are created."`
		Content  string            `json:"content" doc:"The file's content: text, or base64 when encoding is base64."`
		Encoding string            `json:"encoding,omitempty" enum:"utf-8,base64" default:"utf-8" doc:"utf-8 (default) or base64."`
		Metadata map[string]string `json:"metadata,omitempty" doc:"The file's metadata, replacing what it had (none given: none kept): keys are HTTP tokens (lowercased), values printable ASCII; at most 32 keys and 16 KiB together. Kept with the file as user.e2b.<key> extended attributes, which the session's code sees, as E2B's files.write(..., {metadata}) keeps it; listings return it."`
	}
}

// FileInfoOutput describes a written file.
type FileInfoOutput struct {
	Body *service.FileInfo
}

// FileListOutput is a workspace listing.
type FileListOutput struct {
	Body struct {
		Files     []service.FileInfo `json:"files"`
		Truncated bool               `json:"truncated" doc:"The listing stopped at one of its bounds (entries, depth or bytes of paths): files is only part of the tree."`
	}
}

// sessionRoutes registers the session lifecycle (create, list, get, close,
// restart), then the workspace's file routes.
func (s *Server) sessionRoutes() {
	tags := []string{"Sessions"}
	huma.Register(s.api, huma.Operation{
		OperationID: "create-session", Method: http.MethodPost, Path: "/sessions", Tags: tags, DefaultStatus: http.StatusCreated,
		Summary:     "Open a persistent Python session",
		Description: "Starts an interpreter that keeps variables, imports and functions between executions, with a /workspace directory for files. A failing execution does not end it; a timeout or out-of-memory does (restart then keeps the files). Sessions belong to the API key that created them. from_snapshot starts it from a snapshot (404 when there is no such snapshot of yours, 422 when it cannot be loaded here); on_timeout pause pauses it at the end of its life instead of ending it.",
		Errors:      []int{400, 401, 404, 409, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *CreateSessionInput) (*SessionOutput, error) {
		req, err := in.Body.Request(owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		info, err := s.svc.CreateSession(ctx, req)
		if err != nil {
			return nil, problemFor(err)
		}
		return &SessionOutput{Status: http.StatusCreated, Body: info}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "list-sessions", Method: http.MethodGet, Path: "/sessions", Tags: tags,
		Summary: "List your sessions", Errors: []int{401},
	}, func(ctx context.Context, _ *struct{}) (*SessionListOutput, error) {
		out := &SessionListOutput{}
		out.Body.Sessions = s.svc.ListSessions(ctx, owner(ctx))
		return out, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "get-session", Method: http.MethodGet, Path: "/sessions/{id}", Tags: tags,
		Summary: "Describe a session", Errors: []int{401, 404},
	}, func(ctx context.Context, in *SessionIDInput) (*SessionOutput, error) {
		info, err := s.svc.GetSession(ctx, in.ID, owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		return &SessionOutput{Status: http.StatusOK, Body: info}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "close-session", Method: http.MethodDelete, Path: "/sessions/{id}", Tags: tags, DefaultStatus: http.StatusNoContent,
		Summary: "Close a session", Description: "Ends the session, its interpreter and its workspace files.", Errors: []int{401, 404, 429},
	}, func(ctx context.Context, in *SessionIDInput) (*struct{}, error) {
		if err := s.svc.CloseSession(ctx, in.ID, owner(ctx)); err != nil {
			return nil, problemFor(err)
		}
		return nil, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "restart-session", Method: http.MethodPost, Path: "/sessions/{id}/restart", Tags: tags,
		Summary:     "Restart a session",
		Description: "Starts a fresh interpreter for the session (its variables are lost), keeping its workspace files. Use it after a timeout or out-of-memory ended the session.",
		Errors:      []int{401, 404, 429, 503},
	}, func(ctx context.Context, in *SessionIDInput) (*SessionOutput, error) {
		info, err := s.svc.RestartSession(ctx, in.ID, owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		return &SessionOutput{Status: http.StatusOK, Body: info}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "session-metrics", Method: http.MethodGet, Path: "/sessions/{id}/metrics", Tags: tags,
		Summary:     "What a session's sandbox uses now",
		Description: "A sample of the session's CPU (its share of its CPU bandwidth since the previous sample, or since it started), memory (its interpreter's and running commands' cgroups, page cache included, against its limit) and disk (what its workspace holds, against its size limit). A parked session (paused into the snapshot store) has no sandbox to measure: 409.",
		Errors:      []int{401, 404, 409, 429, 503},
	}, func(ctx context.Context, in *SessionIDInput) (*SessionMetricsOutput, error) {
		m, err := s.svc.SessionMetrics(ctx, in.ID, owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		return &SessionMetricsOutput{Body: m}, nil
	})
	s.fileRoutes()
	s.logRoutes()
	s.networkRoutes()
	s.secretRoutes()
}

// SessionMetricsOutput is GET /sessions/{id}/metrics.
type SessionMetricsOutput struct {
	Body *service.SessionMetrics
}

// fileRoutes registers the operations on a session's workspace files.
func (s *Server) fileRoutes() {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-files", Method: http.MethodGet, Path: "/sessions/{id}/files", Tags: []string{"Files"},
		Summary: "List a session's files", Description: "Lists a directory of the session's filesystem (default: its workspace) with sizes, modes and metadata, within bounds (truncated says when it stopped).",
		Errors: []int{400, 401, 403, 404, 429},
	}, func(ctx context.Context, in *FilePathInput) (*FileListOutput, error) {
		files, err := s.svc.ListFiles(ctx, in.ID, owner(ctx), in.Path)
		if err != nil {
			return nil, problemFor(err)
		}
		out := &FileListOutput{}
		out.Body.Files, out.Body.Truncated = files.Files, files.Truncated
		return out, nil
	})
	s.fileDownloadRoutes()
	huma.Register(s.api, huma.Operation{
		OperationID: "write-file", Method: http.MethodPut, Path: "/sessions/{id}/files/content", Tags: []string{"Files"},
		Summary:     "Write a file into a session",
		Description: "Writes a file into the session's workspace (the code then opens it by relative path or /workspace/...) or its /tmp, with its metadata, within the per-file and per-workspace size limits. The read-only system tree is permission denied (403).",
		Errors:      []int{400, 401, 403, 404, 413, 422, 429}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *WriteFileInput) (*FileInfoOutput, error) {
		data, err := api.DecodeContent(in.Body.Content, in.Body.Encoding)
		if err != nil {
			return nil, problemFor(err)
		}
		fi, err := s.svc.WriteFileWith(ctx, in.ID, owner(ctx), in.Body.Path, data, in.Body.Metadata)
		if err != nil {
			return nil, problemFor(err)
		}
		return &FileInfoOutput{Body: fi}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "delete-file", Method: http.MethodDelete, Path: "/sessions/{id}/files/content", Tags: []string{"Files"}, DefaultStatus: http.StatusNoContent,
		Summary: "Delete a file or directory of a session", Description: "Deletes a file or directory tree of the session's workspace or /tmp (the read-only system tree is permission denied, 403).",
		Errors: []int{400, 401, 403, 404, 429},
	}, func(ctx context.Context, in *FilePathInput) (*struct{}, error) {
		if err := s.svc.DeleteFile(ctx, in.ID, owner(ctx), in.Path); err != nil {
			return nil, problemFor(err)
		}
		return nil, nil
	})
}
