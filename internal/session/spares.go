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
	// machines are native machine sessions of the same shape, started at
	// machine's home, for the machine sessions one surface asks for most
	// (StartMachineSpares).
	machines *fleet.Kept[*Session]
	machine  MachineShape
}

// MachineShape is what the machine spares are started as, besides the
// spares' imports and limits: a request fits them with this home and
// this servers setting, no variables of its own and the host's root.
type MachineShape struct {
	Home    string
	Servers bool
}

// request is the start of a machine spare.
func (m MachineShape) request() Request {
	return Request{Home: m.Home, Servers: m.Servers, Machine: true}
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
		if k := t.keepSpares(backend, spareClass(backend), Request{}, n); k != nil {
			sp.byBackend[backend] = k
		}
	}
}

// StartMachineSpares starts keeping n native machine sessions of shape
// (and of StartSpares' imports and limits), for machine sessions asked
// for in that shape. Call once, after StartSpares, before the table is
// shared.
func (t *Table) StartMachineSpares(shape MachineShape, n int) {
	if n <= 0 {
		return
	}
	t.spares.machine = shape
	t.spares.machines = t.keepSpares(fleet.Native, "machine/"+fleet.Native, shape.request(), n)
}

// keepSpares has the fleet keep n spares of backend started as req (its
// shape's fields alone), or returns nil.
func (t *Table) keepSpares(backend, class string, req Request, n int) *fleet.Kept[*Session] {
	create := func(ctx context.Context, launch fleet.Launch) (*Session, error) {
		se, err := t.newSpare(backend, req, launch)
		if err != nil {
			t.log.Warn("a spare session did not start", "backend", backend, "class", class, "error", err)
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
	k, err := fleet.Keep(t.opts.Fleet, class, n, create, t.Drop, alive)
	if err != nil {
		return nil
	}
	return k
}

// fitsMachine reports whether a session of req on backend, in these
// imports and limits, starts as a machine spare does: every field of the
// request that its sandbox's start reads is the spare's.
func (sp *spares) fitsMachine(req Request, backend string, imports policy.ImportPolicy, limits fleet.Limits) bool {
	return sp.machines != nil && req.Machine && backend == fleet.Native && req.Home == sp.machine.Home &&
		req.Servers == sp.machine.Servers && len(req.Env) == 0 && req.Environment == "" && sp.fits(imports, limits)
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
	return takeKept(t.spares.byBackend[backend])
}

// takeKept returns a spare of k that is still alive, or nil.
func takeKept(k *fleet.Kept[*Session]) *Session {
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

// newSpare starts a session of the spares' shape on backend, started
// as req (a machine spare's shape; nothing else of it is read).
func (t *Table) newSpare(backend string, req Request, launch fleet.Launch) (*Session, error) {
	now := time.Now()
	se := &Session{id: "s" + fleet.NewID(), req: req, imports: t.spares.imports, limits: t.spares.limits, created: now, used: now, backend: backend,
		secretsOf: t.opts.Secrets}
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
