package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/session"
)

// Sessions that outlive their sandbox: pause and resume, snapshots, forks.

var (
	// ErrSessionPaused: the session is paused and the request does not
	// resume it (a session with manual resume, or a second pause).
	ErrSessionPaused = session.ErrPaused
	// ErrSnapshotNotFound: no such snapshot, or not the caller's.
	ErrSnapshotNotFound = errors.New("snapshot not found")
	// ErrSnapshotUnusable: the snapshot cannot be loaded here: it was
	// altered (its seal fails), or it was made by another gVisor build or
	// platform.
	ErrSnapshotUnusable = errors.New("snapshot unusable")
)

// SnapshotInfo describes a snapshot: a persistent copy of a session (its
// workspace and its interpreter's state) that new sessions start from.
type SnapshotInfo struct {
	ID        string    `json:"snapshot_id"`
	Name      string    `json:"name,omitempty"`
	SessionID string    `json:"session_id"`
	Backend   string    `json:"backend"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	SizeBytes int64     `json:"size_bytes"`
	// NotSaved names what of the interpreter's state could not be saved
	// (natively: generators, sockets, threads...), with why.
	NotSaved []string `json:"not_saved,omitempty"`
}

// SnapshotFilter narrows a listing of snapshots (empty fields: all).
type SnapshotFilter struct {
	SessionID string
	Name      string // the name or the id
}

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

// MaxForks is the most copies one fork makes.
const MaxForks = 100

// MaxSnapshotName bounds a snapshot's name, kept with it and given back
// in every listing.
const MaxSnapshotName = 128

// CheckSnapshotName refuses a name that is too long or not printable
// text ("" is no name).
func CheckSnapshotName(name string) error {
	if len(name) > MaxSnapshotName {
		return fmt.Errorf("%w: a snapshot name has at most %d bytes, not %d", ErrInvalidRequest, MaxSnapshotName, len(name))
	}
	if !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return fmt.Errorf("%w: the snapshot name %s is not printable text", ErrInvalidRequest, Quote(name))
	}
	return nil
}

// PauseMode says what a pause keeps, and where.
type PauseMode struct {
	// KeepMemory keeps the interpreter's memory; else only the files.
	KeepMemory bool
	// Park writes the session, memory included, into the snapshot store
	// now, freeing its memory and slot here (as a pause longer than
	// SANDBOX_PAUSED_IN_MEMORY_TTL is); it needs KeepMemory. A session
	// paused in memory may be parked too.
	Park bool
}

// PauseSession pauses a session: it stops running and uses no CPU. With
// KeepMemory its memory is kept, and a resume goes on from where it
// stood; without, only its workspace is kept and its sandbox ends,
// freeing its slot, and a resume starts a fresh interpreter on it.
// Pausing a paused session fails with ErrSessionPaused (unless it parks
// one paused in memory).
func (s *Service) PauseSession(ctx context.Context, id, owner string, mode PauseMode) (*SessionInfo, error) {
	keepMemory := mode.KeepMemory
	return do(ctx, s, OpPause, call[*SessionInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, KeepMemory: keepMemory, Park: mode.Park},
		check: func() error {
			if mode.Park && !keepMemory {
				return fmt.Errorf("%w: park keeps the memory in the store: it needs keep_memory", ErrInvalidRequest)
			}
			return nil
		},
		run: func(ctx context.Context) (*SessionInfo, error) {
			se, err := s.session(id, owner)
			if errors.Is(err, ErrSessionNotFound) {
				if _, _, ok, perr := s.parked(ctx, owner, id); ok {
					return nil, fmt.Errorf("%w: session %s is paused already (parked in the snapshot store)", ErrSessionPaused, id)
				} else if perr != nil {
					return nil, perr
				}
			}
			if err != nil {
				return nil, err
			}
			if mode.Park {
				return s.parkOnRequest(ctx, se)
			}
			info, err := s.sessions.Pause(ctx, se, keepMemory)
			if err != nil {
				return nil, err
			}
			out := SessionInfo(info)
			return &out, nil
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
	res, err := do(ctx, s, OpResume, call[resumed]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id},
		run: func(ctx context.Context) (resumed, error) {
			back := false
			if !s.sessions.Has(id) {
				// Parked in the store: brought back, running.
				if err := s.bringBack(ctx, owner, id, parkResume); err != nil {
					return resumed{}, err
				}
				back = s.sessions.Has(id)
			}
			se, err := s.session(id, owner)
			if err != nil {
				return resumed{}, err
			}
			info, ok, err := s.sessions.Resume(ctx, se)
			ok = ok || back
			if err != nil {
				return resumed{}, err
			}
			out := SessionInfo(info)
			return resumed{&out, ok}, nil
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
	return do(ctx, s, OpSnapshot, call[*SnapshotInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Name: name},
		check: func() error { return CheckSnapshotName(name) },
		run: func(ctx context.Context) (*SnapshotInfo, error) {
			se, err := s.session(id, owner)
			if err != nil {
				return nil, err
			}
			return s.saveSnapshot(ctx, se, owner, name)
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
	return do(ctx, s, OpFork, call[[]ForkResult]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Count: count, Lifetime: lifetime},
		check: func() error {
			if count < 1 || count > MaxForks {
				return fmt.Errorf("%w: count %d: a fork makes 1 to %d copies", ErrInvalidRequest, count, MaxForks)
			}
			return s.checkLifetime(lifetime, time.Now())
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

// fork snapshots the session, starts count sessions from the snapshot,
// then deletes it.
func (s *Service) fork(ctx context.Context, id, owner string, count int, lifetime time.Duration) ([]ForkResult, error) {
	se, err := s.session(id, owner)
	if err != nil {
		return nil, err
	}
	if se.Paused() {
		return nil, fmt.Errorf("%w: session %s is paused; resume it before forking it", ErrSessionPaused, id)
	}
	if se.Backend() == fleet.GVisor {
		return s.forkImage(ctx, se, owner, count, lifetime)
	}
	snap, err := s.saveSnapshot(ctx, se, owner, "")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := s.deleteSnapshot(context.WithoutCancel(ctx), owner, snap.ID); err != nil {
			s.log().Warn("a fork's snapshot could not be deleted", "snapshot", snap.ID, "err", err)
		}
	}()
	req := se.Request()
	out := make([]ForkResult, count)
	for i := range out {
		info, err := s.openFromSnapshotOf(ctx, SessionRequest{Owner: owner, FromSnapshot: snap.ID, Lifetime: lifetime,
			OnTimeout: req.OnTimeout, ManualResume: req.ManualResume, Labels: req.Labels, Template: req.Template}, se.Environment())
		if err != nil {
			out[i].Error = &ForkError{Kind: ErrorKind(err), Message: err.Error()}
			continue
		}
		info.FromSnapshot = "" // the fork's snapshot is gone once it returns
		out[i].Session = info
	}
	return out, nil
}

// ListSnapshots lists the owner's snapshots, newest first.
func (s *Service) ListSnapshots(ctx context.Context, owner string, f SnapshotFilter) ([]SnapshotInfo, error) {
	return do(ctx, s, opSnapshots, call[[]SnapshotInfo]{
		run: func(ctx context.Context) ([]SnapshotInfo, error) { return s.listSnapshots(ctx, owner, f) },
	})
}

// DeleteSnapshot deletes one of the owner's snapshots.
func (s *Service) DeleteSnapshot(ctx context.Context, owner, id string) error {
	_, err := do(ctx, s, opDeleteSnapshot, call[struct{}]{
		run: func(ctx context.Context) (struct{}, error) { return struct{}{}, s.deleteSnapshot(ctx, owner, id) },
		success: func(struct{}, time.Duration) Event {
			return Event{Kind: EventSession, Action: "delete_snapshot", Outcome: "success", Detail: id}
		},
	})
	return err
}
