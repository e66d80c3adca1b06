package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/check"
	"github.com/codecage/codecage/internal/service/persist"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// Sessions that outlive their sandbox: pause and resume, snapshots, forks
// and parking are the persistence domain (internal/service/persist); here
// are its operations in the service's envelope, and its names as the
// surfaces spell them (service.SnapshotInfo).

// The persistence domain's types (persist documents each). Aliases: the
// OpenAPI schema keeps their names.
type (
	SnapshotInfo   = persist.SnapshotInfo
	SnapshotFilter = persist.SnapshotFilter
	PauseMode      = persist.PauseMode
)

// ForkResult is one copy of a fork: its session, or why it failed.
type ForkResult struct {
	Session *SessionInfo `json:"session,omitempty"`
	Error   *ForkError   `json:"error,omitempty"`
}

// ForkError is a copy that could not be started.
type ForkError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// The bounds of a fork and of a snapshot's name (persist documents each).
const (
	MaxForks        = persist.MaxForks
	MaxSnapshotName = persist.MaxSnapshotName
)

// CheckSnapshotName refuses a name that is too long or not printable
// text (persist.CheckSnapshotName).
func CheckSnapshotName(name string) error { return persist.CheckSnapshotName(name) }

// What an operation does with a session parked in the store (a column of
// the operations table; persist.Rule).
type parkRule = persist.Rule

const (
	parkWake   = persist.ParkWake
	parkResume = persist.ParkResume
	parkLeave  = persist.ParkLeave
)

// newPersist is the persistence domain of a service whose session table
// and environments are made.
func (s *Service) newPersist() *persist.Persist {
	return persist.New(s.cfg, s.sessions, s.envs, persist.Options{Log: s.log, Backend: s.backendFor,
		Imports: s.resolveImports,
		Shape: func(req SessionRequest, imports policy.ImportPolicy) (fleet.Limits, error) {
			limits, err := s.limits(Request{MemoryBytes: req.MemoryBytes}, imports.Whole())
			if err != nil {
				return limits, err
			}
			return limits, check.Session(req, s.cfg.SessionMaxLifetime)
		},
		StartEnvironment: s.startEnvironmentOrDrop,
		Metadata:         wsfs.MetaLimits{Keys: MaxMetadataKeys, Bytes: MaxMetadataBytes}})
}

// sessionInfo is info as the surfaces have it.
func sessionInfo(info session.Info, err error) (*SessionInfo, error) {
	if err != nil {
		return nil, err
	}
	out := SessionInfo(info)
	return &out, nil
}

// parked describes the owner's parked session id, when there is one.
func (s *Service) parked(ctx context.Context, owner, id string) (*SessionInfo, bool, error) {
	info, ok, err := s.persist.Parked(ctx, owner, id)
	if !ok || err != nil {
		return nil, ok, err
	}
	out := SessionInfo(info)
	return &out, true, nil
}

// parkedSessions lists the owner's parked sessions.
func (s *Service) parkedSessions(ctx context.Context, owner string) []SessionInfo {
	list := s.persist.ParkedSessions(ctx, owner)
	out := make([]SessionInfo, len(list))
	for i, info := range list {
		out[i] = SessionInfo(info)
	}
	return out
}

// openFromSnapshot opens a session of req from the owner's snapshot
// req.FromSnapshot (persist.Restore).
func (s *Service) openFromSnapshot(ctx context.Context, req SessionRequest) (*SessionInfo, error) {
	var err error
	if req.Network, err = check.Network(req.Network, true); err != nil {
		return nil, err
	}
	if err := checkBindings(req.Credentials, true); err != nil {
		return nil, err
	}
	if err := s.ownerHolds(ctx, req.Owner, req.Credentials, false); err != nil {
		return nil, err
	}
	info, err := s.persist.Restore(ctx, req)
	return (*SessionInfo)(info), err
}

// PauseSession pauses a session: it stops running and uses no CPU. With
// KeepMemory its memory is kept, and a resume goes on from where it
// stood; without, only its workspace is kept and its sandbox ends,
// freeing its slot, and a resume starts a fresh interpreter on it.
// Pausing a paused session fails with ErrSessionPaused (unless it parks
// one paused in memory).
func (s *Service) PauseSession(ctx context.Context, id, owner string, mode PauseMode) (*SessionInfo, error) {
	keepMemory := mode.KeepMemory
	return do(ctx, s, opPause, call[*SessionInfo]{
		session: id, owner: owner, args: pauseArgs{KeepMemory: keepMemory, Park: mode.Park},
		check: func() error {
			if mode.Park && !keepMemory {
				return fmt.Errorf("%w: park keeps the memory in the store: it needs keep_memory", ErrInvalidRequest)
			}
			return nil
		},
		run: func(ctx context.Context) (*SessionInfo, error) {
			se, err := s.session(id, owner)
			if errors.Is(err, ErrSessionNotFound) {
				if _, ok, perr := s.parked(ctx, owner, id); ok {
					return nil, fmt.Errorf("%w: session %s is paused already (parked in the snapshot store)", ErrSessionPaused, id)
				} else if perr != nil {
					return nil, perr
				}
			}
			if err != nil {
				return nil, err
			}
			return sessionInfo(s.persist.Pause(ctx, se, mode))
		},
		success: func(info *SessionInfo, took time.Duration) Event {
			detail := id + " keep_memory"
			switch {
			case mode.Park:
				detail = id + " parked in the snapshot store"
			case !keepMemory:
				detail = id + " workspace only"
			}
			return Event{Kind: EventSession, Action: "pause", Backend: info.Backend, Outcome: "success", Duration: took, Detail: detail}
		},
	})
}

// ResumeSession makes a paused session run again; resumed is false when
// it was running.
func (s *Service) ResumeSession(ctx context.Context, id, owner string) (*SessionInfo, bool, error) {
	res, err := do(ctx, s, opResume, call[resumed]{
		session: id, owner: owner,
		run: func(ctx context.Context) (resumed, error) {
			info, ok, err := s.persist.Resume(ctx, owner, id)
			out, err := sessionInfo(info, err)
			return resumed{out, ok}, err
		},
		success: func(r resumed, took time.Duration) Event {
			if !r.Resumed {
				return Event{} // nothing happened: not audited
			}
			return Event{Kind: EventSession, Action: "resume", Backend: r.Info.Backend, Outcome: "success", Duration: took, Detail: id}
		},
	})
	return res.Info, res.Resumed, err
}

// SnapshotSession saves a persistent copy of a session, which keeps
// running: new sessions start from it (SessionRequest.FromSnapshot).
func (s *Service) SnapshotSession(ctx context.Context, id, owner, name string) (*SnapshotInfo, error) {
	return do(ctx, s, opSnapshot, call[*SnapshotInfo]{
		session: id, owner: owner, args: snapshotArgs{Name: name},
		check: func() error { return CheckSnapshotName(name) },
		run: func(ctx context.Context) (*SnapshotInfo, error) {
			return inSession(s, id, owner, func(se *session.Session) (*SnapshotInfo, error) { return s.persist.Save(ctx, se, owner, name) })
		},
		success: func(info *SnapshotInfo, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "snapshot", Backend: info.Backend, Outcome: "success", Duration: took,
				Detail: id + " " + info.ID + fmt.Sprintf(" %d bytes", info.SizeBytes)}
		},
	})
}

// ForkSession makes count live copies of a session now, each with its own
// copy of the workspace; lifetime (0: the default) is each copy's.
func (s *Service) ForkSession(ctx context.Context, id, owner string, count int, lifetime time.Duration) ([]ForkResult, error) {
	return do(ctx, s, opFork, call[[]ForkResult]{
		session: id, owner: owner, args: forkArgs{Count: count, Lifetime: lifetime},
		check: func() error {
			if count < 1 || count > MaxForks {
				return fmt.Errorf("%w: count %d: a fork makes 1 to %d copies", ErrInvalidRequest, count, MaxForks)
			}
			return check.Lifetime(lifetime, time.Now(), s.cfg.SessionMaxLifetime)
		},
		run: func(ctx context.Context) ([]ForkResult, error) { return s.fork(ctx, id, owner, count, lifetime) },
		success: func(res []ForkResult, took time.Duration) Event {
			made := 0
			for _, r := range res {
				if r.Session != nil {
					made++
				}
			}
			return Event{Kind: EventSession, Action: "fork", Outcome: "success", Duration: took, Detail: fmt.Sprintf("%s %d of %d", id, made, count)}
		},
	})
}

// fork makes count copies of the owner's session id (persist.Fork).
func (s *Service) fork(ctx context.Context, id, owner string, count int, lifetime time.Duration) ([]ForkResult, error) {
	copies, err := inSession(s, id, owner, func(se *session.Session) ([]persist.Copy, error) {
		return s.persist.Fork(ctx, se, owner, count, lifetime)
	})
	if err != nil {
		return nil, err
	}
	out := make([]ForkResult, len(copies))
	for i, c := range copies {
		if c.Err != nil {
			out[i].Error = &ForkError{Kind: ErrorKind(c.Err), Message: c.Err.Error()}
			continue
		}
		out[i].Session = (*SessionInfo)(c.Info)
	}
	return out, nil
}

// ListSnapshots lists the owner's snapshots, newest first.
func (s *Service) ListSnapshots(ctx context.Context, owner string, f SnapshotFilter) ([]SnapshotInfo, error) {
	return do(ctx, s, opSnapshots, call[[]SnapshotInfo]{
		run: func(ctx context.Context) ([]SnapshotInfo, error) { return s.persist.List(ctx, owner, f) },
	})
}

// DeleteSnapshot deletes one of the owner's snapshots.
func (s *Service) DeleteSnapshot(ctx context.Context, owner, id string) error {
	_, err := do(ctx, s, opDeleteSnapshot, call[struct{}]{
		run: func(ctx context.Context) (struct{}, error) { return struct{}{}, s.persist.Delete(ctx, owner, id) },
		success: func(struct{}, time.Duration) Event {
			return Event{Kind: EventSession, Action: "delete_snapshot", Outcome: "success", Detail: id}
		},
	})
	return err
}

// The operations that pause, save and copy sessions.
const (
	opPause    = "pause"
	opResume   = "resume"
	opSnapshot = "snapshot"
	opFork     = "fork"
	// The snapshot store is shared by the replicas: any of them answers.
	opSnapshots      = "snapshots"
	opDeleteSnapshot = "delete_snapshot"
)

func persistOps() map[string]op {
	return map[string]op{
		opPause: {admit: admitLight, kind: EventSession, action: "pause", parked: parkLeave, peer: peerOp[pauseArgs, *SessionInfo]{run: runPause, do: servePause}},
		// A resume may start a sandbox (after a pause that kept no memory).
		opResume: {admit: admitHeavy, kind: EventSession, action: "resume", parked: parkLeave, peer: peerOp[noArgs, resumed]{run: runRestart, do: serveResume}},
		// A snapshot and a fork copy a workspace and an image: a start's time, and more.
		opSnapshot:       {admit: admitHeavy, kind: EventSession, action: "snapshot", peer: peerOp[snapshotArgs, *SnapshotInfo]{run: runSnapshot[snapshotArgs], do: serveSnapshot}},
		opFork:           {admit: admitHeavy, kind: EventSession, action: "fork", peer: peerOp[forkArgs, []ForkResult]{run: runSnapshot[forkArgs], do: serveFork}},
		opSnapshots:      {admit: admitNone, kind: EventSession, action: "list_snapshots", quiet: true},
		opDeleteSnapshot: {admit: admitLight, kind: EventSession, action: "delete_snapshot"},
	}
}

// pauseArgs are a PauseMode across replicas.
type pauseArgs struct {
	KeepMemory bool `json:"keep_memory,omitempty"`
	Park       bool `json:"park,omitempty"`
}

func servePause(ctx context.Context, s *Service, call PeerCall, a pauseArgs, _ outputFunc) (*SessionInfo, error) {
	return s.PauseSession(ctx, call.SessionID, call.Owner, PauseMode(a))
}

// runPause: a pause waits for the request in progress in the session.
func runPause(s *Service, _ pauseArgs) time.Duration { return s.cfg.MaxTimeout + 10*time.Second }

// resumed is a resume's answer across replicas.
type resumed struct {
	Info    *SessionInfo `json:"info"`
	Resumed bool         `json:"resumed"`
}

func serveResume(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) (resumed, error) {
	info, ok, err := s.ResumeSession(ctx, call.SessionID, call.Owner)
	return resumed{info, ok}, err
}

// snapshotArgs name the snapshot.
type snapshotArgs struct {
	Name string `json:"name,omitempty"`
}

func serveSnapshot(ctx context.Context, s *Service, call PeerCall, a snapshotArgs, _ outputFunc) (*SnapshotInfo, error) {
	return s.SnapshotSession(ctx, call.SessionID, call.Owner, a.Name)
}

// forkArgs: how many copies, and each one's lifetime (0: the default).
type forkArgs struct {
	Lifetime time.Duration `json:"lifetime,omitempty"`
	Count    int           `json:"count,omitempty"`
}

func serveFork(ctx context.Context, s *Service, call PeerCall, a forkArgs, _ outputFunc) ([]ForkResult, error) {
	return s.ForkSession(ctx, call.SessionID, call.Owner, a.Count, a.Lifetime)
}

// runSnapshot: a snapshot (a fork's too) waits for the request in
// progress, then copies memory and files.
func runSnapshot[Req any](s *Service, _ Req) time.Duration { return s.cfg.MaxTimeout + 5*time.Minute }
