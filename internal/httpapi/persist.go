package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// The routes of sessions that outlive their sandbox (issue #26): pause and
// resume, snapshots, forks. Each checks its input once (api's params) and
// calls the service; errors go through the one status table.

// PauseInput is POST /sessions/{id}/pause.
type PauseInput struct {
	ID   string `path:"id" doc:"The session's id."`
	Body *api.PauseParams
}

// SnapshotSessionInput is POST /sessions/{id}/snapshots.
type SnapshotSessionInput struct {
	ID   string `path:"id" doc:"The session's id."`
	Body *api.SnapshotParams
}

// SnapshotOutput describes a snapshot.
type SnapshotOutput struct {
	Body *service.SnapshotInfo
}

// ForkInput is POST /sessions/{id}/fork.
type ForkInput struct {
	ID   string `path:"id" doc:"The session's id."`
	Body *api.ForkParams
}

// ForkOutput is a fork's copies, in order: each a session or why it failed.
type ForkOutput struct {
	Body struct {
		Sessions []service.ForkResult `json:"sessions"`
	}
}

// SnapshotListOutput is GET /snapshots.
type SnapshotListOutput struct {
	Body struct {
		Snapshots []service.SnapshotInfo `json:"snapshots"`
	}
}

// SnapshotIDInput names a snapshot in the path.
type SnapshotIDInput struct {
	ID string `path:"id" doc:"The snapshot's id."`
}

func (s *Server) persistRoutes() {
	s.pauseRoutes()
	s.copyRoutes()
	s.snapshotRoutes()
}

// pauseRoutes are a session's pause and resume.
func (s *Server) pauseRoutes() {
	sessions := []string{"Sessions"}
	huma.Register(s.api, huma.Operation{
		OperationID: "pause-session", Method: http.MethodPost, Path: "/sessions/{id}/pause", Tags: sessions,
		Summary:     "Pause a session",
		Description: "Stops the session's code (it uses no CPU) and keeps its state: with keep_memory (the default) its memory, so a resume goes on where it stood; without, only its workspace files (its sandbox ends, freeing its slot). A session created with auto_resume (the default) is resumed by its next request; others by POST /sessions/{id}/resume. Pausing a paused session is a conflict (409).",
		Errors:      []int{400, 401, 404, 409, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *PauseInput) (*SessionOutput, error) {
		p := api.PauseParams{}
		if in.Body != nil {
			p = *in.Body
		}
		info, err := s.svc.PauseSession(ctx, in.ID, owner(ctx), p.Mode())
		if err != nil {
			return nil, problemFor(err)
		}
		return &SessionOutput{Status: http.StatusOK, Body: info}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "resume-session", Method: http.MethodPost, Path: "/sessions/{id}/resume", Tags: sessions,
		Summary:     "Resume a paused session",
		Description: "Makes a paused session run again, with its variables and files (its variables are lost if it was paused without keep_memory). A running session is left as it is. Either way the answer is the session's description; its state says running.",
		Errors:      []int{401, 404, 409, 422, 429, 503},
	}, func(ctx context.Context, in *SessionIDInput) (*SessionOutput, error) {
		info, _, err := s.svc.ResumeSession(ctx, in.ID, owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		return &SessionOutput{Status: http.StatusOK, Body: info}, nil
	})
}

// copyRoutes copy a running session: into a snapshot, or into live forks.
func (s *Server) copyRoutes() {
	sessions, snapshots := []string{"Sessions"}, []string{"Snapshots"}
	huma.Register(s.api, huma.Operation{
		OperationID: "snapshot-session", Method: http.MethodPost, Path: "/sessions/{id}/snapshots", Tags: snapshots, DefaultStatus: http.StatusCreated,
		Summary:     "Snapshot a session",
		Description: "Saves a persistent copy of the session (its workspace files and its interpreter's state), which keeps running. New sessions start from it (POST /sessions with from_snapshot), any number of times. not_saved names what of the interpreter's state could not be saved. Snapshots count against their owner's limits and expire (expires_at).",
		Errors:      []int{400, 401, 404, 409, 413, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *SnapshotSessionInput) (*SnapshotOutput, error) {
		p := api.SnapshotParams{}
		if in.Body != nil {
			p = *in.Body
		}
		name, err := p.Check()
		if err != nil {
			return nil, problemFor(err)
		}
		snap, err := s.svc.SnapshotSession(ctx, in.ID, owner(ctx), name)
		if err != nil {
			return nil, problemFor(err)
		}
		return &SnapshotOutput{Body: snap}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "fork-session", Method: http.MethodPost, Path: "/sessions/{id}/fork", Tags: sessions, DefaultStatus: http.StatusCreated,
		Summary:     "Fork a session into live copies",
		Description: "Makes count live copies of the session now (1 to 100), each a new session with its own copy of the workspace and of the interpreter's state, diverging independently; the session itself goes on. Each entry of sessions is a copy's description, or the error that kept it from starting.",
		Errors:      []int{400, 401, 404, 409, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *ForkInput) (*ForkOutput, error) {
		p := api.ForkParams{}
		if in.Body != nil {
			p = *in.Body
		}
		count, lifetime, err := p.Fork()
		if err != nil {
			return nil, problemFor(err)
		}
		res, err := s.svc.ForkSession(ctx, in.ID, owner(ctx), count, lifetime)
		if err != nil {
			return nil, problemFor(err)
		}
		out := &ForkOutput{}
		out.Body.Sessions = res
		return out, nil
	})
}

// snapshotRoutes list and delete the caller's snapshots.
func (s *Server) snapshotRoutes() {
	snapshots := []string{"Snapshots"}
	huma.Register(s.api, huma.Operation{
		OperationID: "list-snapshots", Method: http.MethodGet, Path: "/snapshots", Tags: snapshots,
		Summary: "List your snapshots", Description: "Your snapshots, newest first; session_id and name narrow the list.",
		Errors: []int{401, 503},
	}, func(ctx context.Context, in *api.SnapshotQuery) (*SnapshotListOutput, error) {
		list, err := s.svc.ListSnapshots(ctx, owner(ctx), in.Filter())
		if err != nil {
			return nil, problemFor(err)
		}
		out := &SnapshotListOutput{}
		out.Body.Snapshots = list
		if out.Body.Snapshots == nil {
			out.Body.Snapshots = []service.SnapshotInfo{}
		}
		return out, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "delete-snapshot", Method: http.MethodDelete, Path: "/snapshots/{id}", Tags: snapshots, DefaultStatus: http.StatusNoContent,
		Summary: "Delete a snapshot", Description: "Deletes one of your snapshots; sessions started from it are not affected.",
		Errors: []int{401, 404, 503},
	}, func(ctx context.Context, in *SnapshotIDInput) (*struct{}, error) {
		if err := s.svc.DeleteSnapshot(ctx, owner(ctx), in.ID); err != nil {
			return nil, problemFor(err)
		}
		return nil, nil
	})
}
