package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// A session's life: its lifetime, restarts, closing, and the reaper
// that ends idle and expired sessions.

// checkLifetime refuses a lifetime that would take a session created at
// created past SANDBOX_SESSION_MAX_LIFETIME.
func (s *Service) checkLifetime(d time.Duration, created time.Time) error {
	switch {
	case d < 0:
		return fmt.Errorf("%w: lifetime %s is negative", ErrInvalidRequest, d)
	case d > 0 && time.Now().Add(d).After(created.Add(s.cfg.SessionMaxLifetime).Add(time.Second)):
		return fmt.Errorf("%w: a session lives at most %s from its start (SANDBOX_SESSION_MAX_LIFETIME); %s from now is past that",
			ErrInvalidRequest, s.cfg.SessionMaxLifetime, d.Round(time.Second))
	}
	return nil
}

// expireAfter ends se d from now, used or not (nothing when d is 0: the
// idle TTL applies). Not under se.mu: that is held while code runs, and a
// caller may move the end of a session whose code is running.
func (s *Service) expireAfter(se *session, d time.Duration) {
	if d <= 0 {
		return
	}
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	se.deadline.Store(time.Now().Add(d).UnixNano())
	if se.expiry != nil {
		se.expiry.Reset(d)
		return
	}
	se.expiry = time.AfterFunc(d, func() {
		if time.Now().UnixNano() < se.deadline.Load() {
			return // moved meanwhile; the reset timer fires again
		}
		s.log().Info("session reached its lifetime", "session", se.id, "owner", se.owner)
		s.dropSession(se)
	})
}

// SetSessionLifetime ends a session d from now instead of when it was to
// end (used or not), within SANDBOX_SESSION_MAX_LIFETIME of its start.
// It returns when the session now ends.
func (s *Service) SetSessionLifetime(ctx context.Context, id, owner string, d time.Duration) (time.Time, error) {
	return do(ctx, s, OpLifetime, call[time.Time]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id, Lifetime: d},
		run: func(context.Context) (time.Time, error) { return s.setSessionLifetime(id, owner, d) },
		success: func(end time.Time, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "lifetime", Outcome: "success", Duration: took,
				Detail: fmt.Sprintf("%s: ends at %s", id, end.UTC().Format(time.RFC3339))}
		},
	})
}

func (s *Service) setSessionLifetime(id, owner string, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: lifetime must be positive", ErrInvalidRequest)
	}
	se, err := s.session(id, owner)
	if err != nil {
		return time.Time{}, err
	}
	// se.created is set before a session is shared and never changes.
	if err := s.checkLifetime(d, se.created); err != nil {
		return time.Time{}, err
	}
	s.expireAfter(se, d)
	return time.Unix(0, se.deadline.Load()), nil
}

// RestartSession starts a fresh interpreter for a session, keeping its
// workspace files.
func (s *Service) RestartSession(ctx context.Context, id, owner string) (*SessionInfo, error) {
	return do(ctx, s, OpRestart, call[*SessionInfo]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id},
		run: func(ctx context.Context) (*SessionInfo, error) { return s.restartSession(ctx, id, owner) },
		success: func(info *SessionInfo, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "restart", Profile: strings.Join(info.Profiles, ","), Outcome: "success",
				Duration: took, Detail: id}
		},
	})
}

func (s *Service) restartSession(ctx context.Context, id, owner string) (*SessionInfo, error) {
	se, err := s.session(id, owner)
	if err != nil {
		return nil, err
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	lease := se.sandbox()
	if lease == nil {
		return nil, fmt.Errorf("%w: session %s has no sandbox", ErrSessionEnded, se.id)
	}
	s.addIdleCPU(se.cpu.settle(lease))
	// The same slot: a restart needs no room in the budget.
	replace := func(ctx context.Context, _ string, spec fleet.Spec) (*fleet.Lease, error) {
		return lease, lease.Replace(ctx, spec)
	}
	if err := s.startSession(ctx, se, replace); err != nil {
		return nil, err
	}
	info := se.info(s.cfg)
	return &info, nil
}

// CloseSession ends a session, its sandbox and its workspace.
func (s *Service) CloseSession(ctx context.Context, id, owner string) error {
	_, err := do(ctx, s, OpClose, call[struct{}]{
		session: id, peer: PeerCall{Owner: owner, SessionID: id},
		run: func(context.Context) (struct{}, error) {
			se, err := s.session(id, owner)
			if err == nil {
				s.dropSession(se)
			}
			return struct{}{}, err
		},
		success: func(_ struct{}, took time.Duration) Event {
			return Event{Kind: EventSession, Action: "close", Outcome: "success", Duration: took, Detail: id}
		},
	})
	return err
}

func (s *Service) dropSession(se *session) {
	s.sessions.dropping.RLock()
	defer s.sessions.dropping.RUnlock()
	s.sessions.mu.Lock()
	delete(s.sessions.byID, se.id)
	s.sessions.mu.Unlock()
	lease := se.sandbox()
	if lease != nil {
		s.addIdleCPU(se.cpu.settle(lease))
		lease.Kill(fleet.LimitCanceled) // a request in progress ends now, not at its timeout
	}
	se.lifeMu.Lock()
	if se.expiry != nil {
		se.expiry.Stop()
	}
	se.dropped = true
	for cancel := range se.commands {
		(*cancel)()
	}
	se.lifeMu.Unlock()
	se.cmdsDone.Wait() // their jails hold the workspace
	se.mu.Lock()
	defer se.mu.Unlock()
	if lease != nil {
		lease.Close() // its slot goes back to the budget
	}
	se.closeProxy()
	if se.dir != "" {
		removeWorkspace(se.dir)
	}
	if se.site != "" {
		removeWorkspace(se.site)
	}
	releaseWorkspaces(se.claim)
	se.claim = nil
	if se.uid != 0 {
		fleet.ReleaseUID(se.uid)
		se.uid = 0
	}
	if se.ended == "" {
		se.ended = "closed"
	}
}

// reapSessions closes sessions idle past their TTL or past their lifetime.
func (s *Service) reapSessions() {
	now := time.Now()
	s.sessions.mu.Lock()
	var expired []*session
	for _, se := range s.sessions.byID {
		if !se.mu.TryLock() {
			continue // running a request: not idle
		}
		used := se.used
		if t := se.touched.Load(); t > used.UnixNano() {
			used = time.Unix(0, t)
		}
		se.lifeMu.Lock()
		busy := len(se.commands) > 0
		se.lifeMu.Unlock()
		idle := !busy && now.Sub(used) > s.cfg.SessionIdleTTL && se.deadline.Load() == 0 // a lifetime replaces the idle TTL
		if idle || now.Sub(se.created) > s.cfg.SessionMaxLifetime {
			expired = append(expired, se)
		}
		se.mu.Unlock()
	}
	s.sessions.mu.Unlock()
	for _, se := range expired {
		s.log().Info("session expired", "session", se.id, "owner", se.owner)
		s.dropSession(se)
	}
}

// reaper runs reapSessions until the service closes.
func (s *Service) reaper(stop <-chan struct{}) {
	every := min(s.cfg.SessionIdleTTL/4, time.Minute)
	t := time.NewTicker(max(every, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.reapSessions()
		case <-stop:
			return
		}
	}
}

// closeSessions ends every session (service shutdown).
func (s *Service) closeSessions() {
	s.sessions.mu.Lock()
	var all []*session
	for _, se := range s.sessions.byID {
		all = append(all, se)
	}
	s.sessions.mu.Unlock()
	for _, se := range all {
		s.dropSession(se)
	}
	// Drops that began elsewhere (an expiry, the reaper) end before the
	// service does: their workspaces are unmounted and removed.
	s.sessions.dropping.Lock()
	s.sessions.dropping.Unlock()
}
