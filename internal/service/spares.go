package service

import (
	"context"
	"reflect"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// spares are sessions started ahead of create_session, per backend, for
// the one shape most sessions ask for: the default profiles and memory.
// A request fits a spare when its import policy and limits resolve to the
// spare's, however it spelled them.
// A spare is a fresh sandbox on a fresh workspace that no one has used;
// create_session hands it out under a new owner, so the caller does not
// wait for a sandbox to boot (about 45 ms natively, 0.3 s under gVisor).
// The fleet keeps them, each holding a slot of the budget like any
// pooled sandbox (and giving it up when a caller needs it more).
type spares struct {
	byBackend map[string]*fleet.Kept[*session]
	imports   policy.ImportPolicy // the spares' shape
	limits    fleet.Limits
}

// startSpares starts keeping spare sessions for each backend in use.
func (s *Service) startSpares() {
	c := s.cfg
	sp := &s.spares
	sp.byBackend = map[string]*fleet.Kept[*session]{}
	if c.MaxSessions <= 0 {
		return
	}
	var err error
	if sp.imports, err = s.resolveImports(nil, nil); err == nil {
		sp.limits, err = s.limits(Request{}, sp.imports.Whole())
	}
	if err != nil {
		s.log().Warn("no spare sessions: the default shape does not resolve", "error", err)
		return
	}
	want := map[string]int{}
	if c.Isolation != config.IsolationGVisor {
		want[config.IsolationNative] = c.SessionPoolSize
	}
	if c.GVisorInUse() {
		want[config.IsolationGVisor] = c.GVisorSessionPoolSize
	}
	for backend, n := range want {
		if n <= 0 {
			continue
		}
		create := func(ctx context.Context, launch fleet.Launch) (*session, error) {
			se, err := s.newSpare(backend, launch)
			if err != nil {
				s.log().Warn("a spare session did not start", "backend", backend, "error", err)
			}
			return se, err
		}
		alive := func(se *session) bool {
			select {
			case <-se.sandbox().Done():
				return false // it died waiting (its lifetime, or killed)
			default:
				return true
			}
		}
		if k, err := fleet.Keep(s.fleet, spareClass(backend), n, create, s.dropSession, alive); err == nil {
			sp.byBackend[backend] = k
		}
	}
}

// fits reports whether a session of this import policy and limits
// is what a spare session is (whether its profiles were named or came by
// default does not matter to a session: it gets them whole).
func (sp *spares) fits(imports policy.ImportPolicy, limits fleet.Limits) bool {
	imports.Defaulted = sp.imports.Defaulted
	return limits == sp.limits && reflect.DeepEqual(imports, sp.imports)
}

// takeSpare returns a spare session of backend that is still alive, or
// nil; the fleet starts a replacement either way.
func (s *Service) takeSpare(backend string) *session {
	k := s.spares.byBackend[backend]
	if k == nil {
		return nil
	}
	se, ok := k.TryGet()
	if !ok {
		return nil
	}
	k.Release() // the pool's count: the session holds its sandbox's slot itself
	return se
}

// returnSpare ends a spare that create_session could not use.
func (s *Service) returnSpare(se *session) { s.dropSession(se) }

// newSpare starts a session of the spares' shape on backend.
func (s *Service) newSpare(backend string, launch fleet.Launch) (*session, error) {
	now := time.Now()
	se := &session{id: "s" + fleet.NewID(), imports: s.spares.imports, limits: s.spares.limits, created: now, used: now, backend: backend}
	if err := s.startSession(context.Background(), se, launch); err != nil {
		s.dropSession(se)
		return nil, err
	}
	return se, nil
}

// spareClass names a backend's spare sessions in PoolStats.
func spareClass(backend string) string { return "session/" + backend }
