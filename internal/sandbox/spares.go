package sandbox

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/pool"
)

// spares are sessions started ahead of create_session, per backend, for
// the one shape most sessions ask for: the default profiles and memory.
// A request fits a spare when its import policy and limits resolve to the
// spare's, however it spelled them.
// A spare is a fresh sandbox on a fresh workspace that no one has used;
// create_session hands it out under a new owner, so the caller does not
// wait for a sandbox to boot (about 45 ms natively, 0.3 s under gVisor).
type spares struct {
	mu      sync.Mutex
	ready   map[string][]*session // by backend
	want    map[string]int
	filling map[string]int
	created map[string]int64 // started, by backend
	hits    map[string]int64 // default-shape sessions that found a spare
	misses  map[string]int64 // ... that had to start their own
	closed  bool
	wg      sync.WaitGroup
	imports policy.ImportPolicy // the spares' shape
	limits  jail.Limits
}

// startSpares sets how many spare sessions each backend keeps, and starts
// filling them.
func (s *Service) startSpares() {
	c := s.cfg
	sp := &s.spares
	sp.ready, sp.want, sp.filling = map[string][]*session{}, map[string]int{}, map[string]int{}
	sp.created, sp.hits, sp.misses = map[string]int64{}, map[string]int64{}, map[string]int64{}
	if c.MaxSessions <= 0 {
		return
	}
	var err error
	if sp.imports, err = s.resolveImports(nil, nil); err == nil {
		sp.limits, err = s.limits(Request{}, sp.imports.Whole())
	}
	if err != nil {
		s.log.Warn("no spare sessions: the default shape does not resolve", "error", err)
		return
	}
	if c.Isolation != policy.IsolationGVisor {
		sp.want[policy.IsolationNative] = c.SessionPoolSize
	}
	if c.GVisorInUse() {
		sp.want[policy.IsolationGVisor] = c.GVisorSessionPoolSize
	}
	for backend := range sp.want {
		s.fillSpares(backend)
	}
}

// fits reports whether a session of this import policy and limits
// is what a spare session is (whether its profiles were named or came by
// default does not matter to a session: it gets them whole).
func (sp *spares) fits(imports policy.ImportPolicy, limits jail.Limits) bool {
	imports.Defaulted = sp.imports.Defaulted
	return limits == sp.limits && reflect.DeepEqual(imports, sp.imports)
}

// takeSpare returns a spare session of backend that is still alive, or
// nil; it starts a replacement either way.
func (s *Service) takeSpare(backend string) *session {
	sp := &s.spares
	defer s.fillSpares(backend)
	for {
		sp.mu.Lock()
		list := sp.ready[backend]
		if len(list) == 0 {
			if sp.want[backend] > 0 {
				sp.misses[backend]++
			}
			sp.mu.Unlock()
			return nil
		}
		se := list[0]
		sp.ready[backend] = list[1:]
		sp.mu.Unlock()
		select {
		case <-se.sb.Done():
			s.dropSession(se) // it died waiting (its lifetime, or killed)
		default:
			sp.mu.Lock()
			sp.hits[backend]++
			sp.mu.Unlock()
			return se
		}
	}
}

// returnSpare puts back a spare that create_session could not use.
func (s *Service) returnSpare(se *session) {
	sp := &s.spares
	sp.mu.Lock()
	keep := !sp.closed
	if keep {
		sp.ready[se.backend] = append([]*session{se}, sp.ready[se.backend]...)
	}
	sp.mu.Unlock()
	if !keep {
		s.dropSession(se)
	}
}

// fillSpares starts spare sessions of backend until enough are ready or
// starting.
func (s *Service) fillSpares(backend string) {
	sp := &s.spares
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for !sp.closed && len(sp.ready[backend])+sp.filling[backend] < sp.want[backend] {
		sp.filling[backend]++
		sp.wg.Add(1)
		go func() {
			defer sp.wg.Done()
			se, err := s.newSpare(backend)
			sp.mu.Lock()
			sp.filling[backend]--
			keep := err == nil && !sp.closed
			if err == nil {
				sp.created[backend]++
			}
			if keep {
				sp.ready[backend] = append(sp.ready[backend], se)
			}
			sp.mu.Unlock()
			if err != nil {
				s.log.Warn("a spare session did not start", "backend", backend, "error", err)
			} else if !keep {
				s.dropSession(se)
			}
		}()
	}
}

// newSpare starts a session of the spares' shape on backend.
func (s *Service) newSpare(backend string) (*session, error) {
	now := time.Now()
	se := &session{id: "s" + jail.NewID(), imports: s.spares.imports, limits: s.spares.limits, created: now, used: now, backend: backend}
	if err := s.startSession(context.Background(), se); err != nil {
		s.dropSession(se)
		return nil, err
	}
	return se, nil
}

// closeSpares ends the spare sessions, and waits for those starting.
func (s *Service) closeSpares() {
	sp := &s.spares
	sp.mu.Lock()
	sp.closed = true
	var all []*session
	for b, list := range sp.ready {
		all = append(all, list...)
		delete(sp.ready, b)
	}
	sp.mu.Unlock()
	for _, se := range all {
		s.dropSession(se)
	}
	sp.wg.Wait()
}

// spareClass names a backend's spare sessions in PoolStats.
func spareClass(backend string) string { return "session/" + backend }

// stats adds each backend's spare sessions to out, as a pool's figures.
func (sp *spares) stats(out map[string]pool.Stats) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for backend, want := range sp.want {
		if want == 0 {
			continue
		}
		out[spareClass(backend)] = pool.Stats{Ready: len(sp.ready[backend]), Creating: sp.filling[backend],
			Created: sp.created[backend], Hits: sp.hits[backend], Misses: sp.misses[backend]}
	}
}
