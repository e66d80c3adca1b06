package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/snapstore"
)

// Parked sessions: a session written into the snapshot store under its
// own id (a manifest of kind "paused") and ended here, its memory, slot
// and workspace freed. It is parked when its server stops (every session,
// SANDBOX_PARK_ON_SHUTDOWN) and when it stayed paused in memory past
// SANDBOX_PAUSED_IN_MEMORY_TTL. It stays the caller's session: it is
// described and listed (paused, or running when it was parked running),
// and the next request for it brings it back (the root's do, through
// BringBack),
// here after a restart, or on any replica when the store is shared.

// parkedSpec is a parked session's description in its manifest.
type parkedSpec struct {
	snapshotSpec
	Created       time.Time     `json:"created"`
	PausedAt      time.Time     `json:"paused_at"`
	Left          time.Duration `json:"left,omitempty"`
	Runs          int           `json:"runs,omitempty"`
	Cold          bool          `json:"cold,omitempty"`
	OnTimeout     string        `json:"on_timeout,omitempty"`
	ManualResume  bool          `json:"manual_resume,omitempty"`
	FromSnapshot  string        `json:"from_snapshot,omitempty"`
	PublicTraffic bool          `json:"public_traffic,omitempty"`
	Servers       bool          `json:"servers,omitempty"`
}

// parkSession writes se into the store under its id and ends it here;
// pause: its owner asked, and it is parked as paused (else as it was).
func (p *Persist) parkSession(ctx context.Context, se *session.Session, pause bool) error {
	m := snapstore.Manifest{Kind: snapstore.KindPaused, ID: se.ID(), Owner: se.Owner(), SessionID: se.ID(),
		Backend: se.Backend(), Profiles: se.Imports().Profiles}
	write := func() error {
		_, err := p.storeSession(ctx, m, func(to session.SnapshotTo, seal func(session.Capture, json.RawMessage) error) error {
			return p.sessions.Park(ctx, se, to, pause, func(p session.Parked) error {
				sp := specOf(p.Request, se.Environment())
				sp.Installed = p.Installed
				spec, _ := json.Marshal(parkedSpec{snapshotSpec: sp, Created: p.Created, PausedAt: p.PausedAt,
					Left: p.Left, Runs: p.Runs, Cold: p.Cold, OnTimeout: p.Request.OnTimeout, ManualResume: p.Request.ManualResume,
					FromSnapshot: p.Request.FromSnapshot, PublicTraffic: p.Request.PublicTraffic, Servers: p.Request.Servers})
				return seal(p.Capture, spec)
			})
		})
		return err
	}
	err := write()
	if errors.Is(err, errdefs.ErrInvalidRequest) && p.dropStaleParked(ctx, se) == nil {
		// A copy left from an earlier park whose delete failed.
		err = write()
	}
	return err
}

// dropStaleParked deletes an old parked copy of live session se.
func (p *Persist) dropStaleParked(ctx context.Context, se *session.Session) error {
	st, err := p.snapshots(ctx)
	if err != nil {
		return err
	}
	m, err := st.Stat(ctx, se.Owner(), se.ID())
	if err != nil || m.Kind != snapstore.KindPaused {
		return fmt.Errorf("no stale copy: %v", err)
	}
	return p.Delete(ctx, se.Owner(), se.ID())
}

// parkOnRequest parks se because its owner asked (a pause with park):
// it is described as the store has it.
func (p *Persist) parkOnRequest(ctx context.Context, se *session.Session) (session.Info, error) {
	if err := p.parkSession(ctx, se, true); err != nil {
		return session.Info{}, err
	}
	m, spec, ok, err := p.parked(ctx, se.Owner(), se.ID())
	if err != nil {
		return session.Info{}, err
	}
	if !ok {
		return session.Info{}, fmt.Errorf("%w: session %s was parked, and its copy is gone from the store", errdefs.ErrUnavailable, se.ID())
	}
	return parkedInfo(m, spec), nil
}

// parkedStore is the store where parked sessions are, or nil when there
// can be none yet (a directory store never made): a miss of an unknown
// id does not make one.
func (p *Persist) parkedStore(ctx context.Context) (*snapstore.Store, error) {
	p.snaps.mu.Lock()
	open := p.snaps.st != nil
	p.snaps.mu.Unlock()
	if !open {
		dir, dsn, _ := p.cfg.SnapshotPlace()
		switch {
		case dsn == "":
			if _, err := os.Stat(dir); err != nil {
				return nil, nil
			}
		case p.cfg.SnapshotSecret == "":
			// Parking in PostgreSQL needs the secret, so nothing this
			// replica could read is parked there: an unknown session is
			// not found, not "unavailable" for want of a setting.
			return nil, nil
		}
	}
	return p.snapshots(ctx)
}

// Parked describes the owner's parked session id; ok is false when there
// is none.
func (p *Persist) Parked(ctx context.Context, owner, id string) (info session.Info, ok bool, err error) {
	m, spec, ok, err := p.parked(ctx, owner, id)
	if !ok || err != nil {
		return session.Info{}, false, err
	}
	return parkedInfo(m, spec), true, nil
}

// parked returns the owner's parked session id, when there is one.
func (p *Persist) parked(ctx context.Context, owner, id string) (snapstore.Manifest, parkedSpec, bool, error) {
	var spec parkedSpec
	st, err := p.parkedStore(ctx)
	if st == nil || err != nil {
		return snapstore.Manifest{}, spec, false, err
	}
	m, err := st.Stat(ctx, owner, id)
	switch {
	case errors.Is(err, snapstore.ErrNotFound), errors.Is(err, snapstore.ErrInvalid):
		return m, spec, false, nil
	case err != nil:
		return m, spec, false, errdefs.Snapshot(err)
	case m.Kind != snapstore.KindPaused:
		return m, spec, false, nil
	}
	if err := json.Unmarshal(m.Spec, &spec); err != nil {
		return m, spec, false, fmt.Errorf("%w: parked session %s: its description: %v", errdefs.ErrSnapshotUnusable, bounded.Quote(id), err)
	}
	return m, spec, true, nil
}

// parkedInfo describes a parked session.
func parkedInfo(m snapstore.Manifest, spec parkedSpec) session.Info {
	info := session.Info{ID: m.SessionID, Profiles: m.Profiles, Backend: m.Backend, CreatedAt: spec.Created, LastUsed: m.Created,
		ExpiresAt: m.Expires, Runs: spec.Runs, Home: fleet.HomeOf(spec.Home), Labels: spec.Labels, Template: spec.Template,
		State: "running", OnTimeout: cmp.Or(spec.OnTimeout, "kill"), AutoResume: !spec.ManualResume, FromSnapshot: spec.FromSnapshot,
		PublicTraffic: spec.PublicTraffic}
	if !spec.PausedAt.IsZero() {
		at := spec.PausedAt
		info.State, info.PausedAt, info.LastUsed = "paused", &at, at
	}
	if info.Profiles == nil {
		info.Profiles = []string{}
	}
	return info
}

// Rule is what an operation does with a session parked in the store (a
// row of the root's operations table).
type Rule int

const (
	// ParkWake brings it back first, unless it was paused by its owner
	// with manual resume (errdefs.ErrSessionPaused).
	ParkWake Rule = iota
	// ParkResume brings it back whatever its resume choice.
	ParkResume
	// ParkLeave leaves it where it is: the operation handles it (describe,
	// close, pause).
	ParkLeave
)

// BringBack brings session id back from the store when it is parked
// there and not here; nothing when it is here or nowhere. The root calls
// it for each operation on a session, before the operation runs.
func (p *Persist) BringBack(ctx context.Context, owner, id string, rule Rule) error {
	if rule == ParkLeave || p.sessions.Has(id) {
		return nil
	}
	unlock := p.unparking.lock(id)
	defer unlock()
	if p.sessions.Has(id) {
		return nil // another request brought it back meanwhile
	}
	m, spec, ok, err := p.parked(ctx, owner, id)
	if !ok || err != nil {
		return err
	}
	if rule == ParkWake && spec.ManualResume && !spec.PausedAt.IsZero() {
		return fmt.Errorf("%w: session %s is paused; resume it first", errdefs.ErrSessionPaused, id)
	}
	return p.unpark(ctx, m, spec)
}

// unpark opens the parked session m again under its id, then deletes
// its parked copy. Call with p.unparking's lock of its id.
func (p *Persist) unpark(ctx context.Context, m snapstore.Manifest, spec parkedSpec) error {
	st, err := p.snapshots(ctx)
	if err != nil {
		return err
	}
	snap, err := st.Get(ctx, m.Owner, m.ID)
	if err != nil {
		return errdefs.Snapshot(err)
	}
	back := &session.Parked{ID: m.SessionID, Owner: m.Owner, Created: spec.Created, Runs: spec.Runs, PausedAt: spec.PausedAt,
		Left: spec.Left, Cold: spec.Cold}
	req := session.Request{Owner: m.Owner, Lifetime: spec.Left, OnTimeout: spec.OnTimeout, ManualResume: spec.ManualResume,
		Labels: spec.Labels, Template: spec.Template, FromSnapshot: spec.FromSnapshot, PublicTraffic: spec.PublicTraffic,
		Servers: spec.Servers}
	_, err = p.openSnapshot(ctx, req, snap, back, envstore.Env{})
	snap.Close()
	if err != nil {
		return err
	}
	if err := p.Delete(context.WithoutCancel(ctx), m.Owner, m.ID); err != nil {
		// The session runs; its next park replaces the stale copy.
		p.log().Warn("a resumed session's parked copy could not be deleted", "session", m.ID, "err", err)
	}
	p.log().Info("parked session resumed", "session", m.ID, "owner", m.Owner, "backend", m.Backend, "not_saved", notSavedText(m.NotSaved))
	return nil
}

// CloseParked deletes the owner's parked session id; errdefs.ErrSessionNotFound
// when there is none.
func (p *Persist) CloseParked(ctx context.Context, owner, id string) error {
	unlock := p.unparking.lock(id)
	defer unlock()
	_, _, ok, err := p.parked(ctx, owner, id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", errdefs.ErrSessionNotFound, bounded.Quote(id))
	}
	return p.Delete(ctx, owner, id)
}

// ParkedSessions lists the owner's parked sessions (none when the store
// cannot be read: logged).
func (p *Persist) ParkedSessions(ctx context.Context, owner string) []session.Info {
	st, err := p.parkedStore(ctx)
	if st == nil || err != nil {
		if err != nil {
			p.log().Warn("listing sessions: parked sessions left out", "err", err)
		}
		return nil
	}
	ms, err := st.List(ctx, owner)
	if err != nil {
		p.log().Warn("listing sessions: parked sessions left out", "err", err)
		return nil
	}
	var out []session.Info
	for _, m := range ms {
		if m.Kind != snapstore.KindPaused {
			continue
		}
		var spec parkedSpec
		if json.Unmarshal(m.Spec, &spec) == nil {
			out = append(out, parkedInfo(m, spec))
		}
	}
	return out
}

// ParkAll parks every session (Shutdown), two at a time, within ctx.
func (p *Persist) ParkAll(ctx context.Context) {
	var all []*session.Session
	p.sessions.Each(func(se *session.Session) { all = append(all, se) })
	if len(all) == 0 {
		return
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	parked := 0
	sem := make(chan struct{}, 2)
	for _, se := range all {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := p.parkSession(ctx, se, false); err != nil {
				p.log().Warn("session not parked: it ends with the server", "session", se.ID(), "owner", se.Owner(), "err", err)
				return
			}
			mu.Lock()
			parked++
			mu.Unlock()
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// Parking ends at its bound: a capture that does not heed ctx
		// (an interpreter slow to save its state) ends when Close kills
		// its sandbox, and its session ends with the server.
		mu.Lock()
		n := parked
		mu.Unlock()
		p.log().Warn("parking reached its bound: the sessions not parked yet end with the server", "parked", n, "of", len(all), "took", time.Since(start).Round(time.Millisecond).String())
		return
	}
	p.log().Info("sessions parked in the snapshot store", "parked", parked, "of", len(all), "took", time.Since(start).Round(time.Millisecond).String())
}

// ParkLongPauses parks the sessions paused in memory for longer than
// SANDBOX_PAUSED_IN_MEMORY_TTL, until stop is closed.
func (p *Persist) ParkLongPauses(stop <-chan struct{}) {
	ttl := p.cfg.PausedInMemoryTTL
	tick := time.NewTicker(min(max(ttl/4, 100*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		p.sessions.Each(func(se *session.Session) {
			at, ok := se.PausedSince()
			if !ok || time.Since(at) < ttl {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), p.cfg.QueueTimeout+time.Minute)
			defer cancel()
			if err := p.parkSession(ctx, se, false); err != nil {
				p.log().Warn("a long-paused session could not be parked: it stays paused in memory", "session", se.ID(), "err", err)
				return
			}
			p.log().Info("a long-paused session was parked in the snapshot store", "session", se.ID(), "paused_for", time.Since(at).Round(time.Second).String())
		})
	}
}

// keyedLock serializes work on one key (bringing back one session).
type keyedLock struct {
	mu   sync.Mutex
	held map[string]*keyedEntry
}

type keyedEntry struct {
	mu    sync.Mutex
	users int
}

func (k *keyedLock) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.held == nil {
		k.held = map[string]*keyedEntry{}
	}
	e := k.held[key]
	if e == nil {
		e = &keyedEntry{}
		k.held[key] = e
	}
	e.users++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.users--; e.users == 0 {
			delete(k.held, key)
		}
		k.mu.Unlock()
	}
}

// notSavedText is the start of a not-saved list, for a log line (the
// names come from sandboxed code: at most three, each capped already).
func notSavedText(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], "; ") + fmt.Sprintf("; ... %d in all", len(names))
	}
	return strings.Join(names, "; ")
}
