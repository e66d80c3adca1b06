// Package persist is the service's persistence domain: sessions that
// outlive their sandbox. It pauses and resumes them, writes them into the
// snapshot store (snapstore) as snapshots, forks them, parks them there
// (on shutdown, after a long pause, on request) and brings them back, and
// collects the store.
//
// It is plain logic over the session table, the store, the fleet and the
// environments domain (a copy starts on its environment's content): the
// root admits, audits and forwards, and hands it the session it resolved.
// What it needs of the root's rules for a session's request (its backend,
// imports, limits and shape checks) comes through Options.
package persist

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/envs"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// Persist is the persistence of one service's sessions.
type Persist struct {
	cfg      config.Config
	sessions *session.Table
	envs     *envs.Envs
	o        Options
	snaps    snapshotStore
	// unparking serializes bringing one parked session back (park.go).
	unparking keyedLock
}

// Options are what the domain takes from the root besides its stores.
type Options struct {
	Log func() *slog.Logger
	// Backend is the backend a session gets here, asking for a container
	// or not.
	Backend func(useContainer bool) (string, error)
	// Imports resolves profiles and allowed imports into a policy.
	Imports func(profiles, allowed []string) (policy.ImportPolicy, error)
	// Shape checks a session's request (home, lifetime, labels...) and
	// returns its limits under imports.
	Shape func(req session.Request, imports policy.ImportPolicy) (fleet.Limits, error)
	// StartEnvironment runs environment e's start and ready commands in
	// session id, just opened; a session that does not become ready is
	// closed.
	StartEnvironment func(ctx context.Context, id, owner string, e envstore.Env) error
	// Metadata bounds the file metadata a workspace's archive keeps (the
	// file API's).
	Metadata wsfs.MetaLimits
}

// New returns the persistence of the sessions in table, whose
// environments are es.
func New(cfg config.Config, table *session.Table, es *envs.Envs, o Options) *Persist {
	return &Persist{cfg: cfg, sessions: table, envs: es, o: o}
}

func (p *Persist) log() *slog.Logger { return p.o.Log() }

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

// MaxForks is the most copies one fork makes.
const MaxForks = 100

// MaxSnapshotName bounds a snapshot's name, kept with it and given back
// in every listing.
const MaxSnapshotName = 128

// CheckSnapshotName refuses a name that is too long or not printable
// text ("" is no name).
func CheckSnapshotName(name string) error {
	if len(name) > MaxSnapshotName {
		return fmt.Errorf("%w: a snapshot name has at most %d bytes, not %d", errdefs.ErrInvalidRequest, MaxSnapshotName, len(name))
	}
	if !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return fmt.Errorf("%w: the snapshot name %s is not printable text", errdefs.ErrInvalidRequest, bounded.Quote(name))
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

// Pause pauses se as mode says (the root checked mode).
func (p *Persist) Pause(ctx context.Context, se *session.Session, mode PauseMode) (session.Info, error) {
	if mode.Park {
		return p.parkOnRequest(ctx, se)
	}
	return p.sessions.Pause(ctx, se, mode.KeepMemory)
}

// Resume makes the owner's paused session id run again, bringing it back
// from the store when it is parked there; resumed is false when it was
// running.
func (p *Persist) Resume(ctx context.Context, owner, id string) (info session.Info, resumed bool, err error) {
	back := false
	if !p.sessions.Has(id) {
		// Parked in the store: brought back, running.
		if err := p.BringBack(ctx, owner, id, ParkResume); err != nil {
			return info, false, err
		}
		back = p.sessions.Has(id)
	}
	se, err := p.sessions.Get(id, owner)
	if err != nil {
		return info, false, err
	}
	info, ok, err := p.sessions.Resume(ctx, se)
	return info, ok || back, err
}

// Copy is one copy of a fork: its session, or why it failed.
type Copy struct {
	Info *session.Info
	Err  error
}

// Fork makes count live copies of se now: it snapshots the session,
// starts count sessions from the snapshot, then deletes it (gVisor: one
// checkpoint, images.go).
func (p *Persist) Fork(ctx context.Context, se *session.Session, owner string, count int, lifetime time.Duration) ([]Copy, error) {
	if se.Paused() {
		return nil, fmt.Errorf("%w: session %s is paused; resume it before forking it", errdefs.ErrSessionPaused, se.ID())
	}
	// A fork the key's share has no room for is refused whole, before
	// anything is copied: half a fork is rarely what its caller can use.
	// (A copy the server-wide bound, or the key's own requests meanwhile,
	// leave no room for is still reported in its entry.)
	if err := p.sessions.Room(owner, count); err != nil {
		return nil, err
	}
	if se.Backend() == fleet.GVisor {
		return p.forkImage(ctx, se, owner, count, lifetime)
	}
	snap, err := p.Save(ctx, se, owner, "")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := p.Delete(context.WithoutCancel(ctx), owner, snap.ID); err != nil {
			p.log().Warn("a fork's snapshot could not be deleted", "snapshot", snap.ID, "err", err)
		}
	}()
	req := se.Request()
	out := make([]Copy, count)
	for i := range out {
		info, err := p.restoreOf(ctx, session.Request{Owner: owner, FromSnapshot: snap.ID, Lifetime: lifetime,
			OnTimeout: req.OnTimeout, ManualResume: req.ManualResume, Labels: req.Labels, Template: req.Template}, se.Environment())
		if err != nil {
			out[i].Err = err
			continue
		}
		info.FromSnapshot = "" // the fork's snapshot is gone once it returns
		out[i].Info = info
	}
	return out, nil
}
