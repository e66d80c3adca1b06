package session

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// spares are sessions started ahead of create_session, per backend, for
// the one shape most sessions ask for: the default profiles and memory.
// A request fits a spare when its import policy and limits resolve to the
// spare's, however it spelled them.
// A spare is a fresh sandbox on a fresh workspace that no one has used;
// Create hands it out under a new owner, so the caller does not
// wait for a sandbox to boot (about 45 ms natively, 0.3 s under gVisor).
// The fleet keeps them, each holding a slot of the budget like any
// pooled sandbox (and giving it up when a caller needs it more).
type spares struct {
	byBackend map[string]*fleet.Kept[*Session]
	imports   policy.ImportPolicy // the spares' shape
	limits    fleet.Limits
}

// StartSpares starts keeping spare sessions of this import policy and
// these limits (the default shape, which the service resolves):
// want[backend] of them for each backend. Call once, before the table is
// shared.
func (t *Table) StartSpares(imports policy.ImportPolicy, limits fleet.Limits, want map[string]int) {
	sp := &t.spares
	sp.imports, sp.limits = imports, limits
	for backend, n := range want {
		if n <= 0 {
			continue
		}
		create := func(ctx context.Context, launch fleet.Launch) (*Session, error) {
			se, err := t.newSpare(backend, launch)
			if err != nil {
				t.log.Warn("a spare session did not start", "backend", backend, "error", err)
			}
			return se, err
		}
		alive := func(se *Session) bool {
			select {
			case <-se.sandbox().Done():
				return false // it died waiting (its lifetime, or killed)
			default:
				return true
			}
		}
		if k, err := fleet.Keep(t.opts.Fleet, spareClass(backend), n, create, t.Drop, alive); err == nil {
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
func (t *Table) takeSpare(backend string) *Session {
	k := t.spares.byBackend[backend]
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

// returnSpare ends a spare that Create could not use.
func (t *Table) returnSpare(se *Session) { t.Drop(se) }

// newSpare starts a session of the spares' shape on backend.
func (t *Table) newSpare(backend string, launch fleet.Launch) (*Session, error) {
	now := time.Now()
	se := &Session{id: "s" + fleet.NewID(), imports: t.spares.imports, limits: t.spares.limits, created: now, used: now, backend: backend}
	if err := t.start(context.Background(), se, launch); err != nil {
		t.Drop(se)
		return nil, err
	}
	if err := warmState(se.sandbox()); err != nil {
		t.Drop(se)
		return nil, err
	}
	return se, nil
}

// spareWarmTimeout bounds a spare's warm-up (an import, on a busy host).
const spareWarmTimeout = 20 * time.Second

// warmState has a native spare's harness load what a snapshot and a
// restore use (cloudpickle: 40-70 ms of CPU) while it waits: the session
// it becomes snapshots without that wait, and a session restored into it
// too. Under gVisor a snapshot is a memory image: nothing to load.
func warmState(lease *fleet.Lease) error {
	err := lease.WarmState(spareWarmTimeout)
	if errors.Is(err, fleet.ErrStateNotSupported) {
		return nil
	}
	return err
}

// spareClass names a backend's spare sessions in PoolStats.
func spareClass(backend string) string { return "session/" + backend }

// FitsSpares reports whether Create would hand a session of this import
// policy and these limits a spare (when one is ready).
func (t *Table) FitsSpares(imports policy.ImportPolicy, limits fleet.Limits) bool {
	return t.spares.fits(imports, limits)
}
