package session

import (
	"context"
	"time"
)

// A native session restored from a snapshot starts in a spare session's
// sandbox when the snapshot's shape is the spares' (the default one): no
// interpreter to boot, and a spare has the state machinery loaded already
// (warmState), so the restore is the state's own work. A spare is fresh
// (nothing of anyone's ran in it) and its workspace is empty: it takes the
// snapshot's files as a new sandbox's workspace would.

// restoreIntoSpare opens a session of req from the native snapshot from
// in a spare; ok is false when no spare fits or is ready (the caller
// starts a sandbox).
func (t *Table) restoreIntoSpare(req Request, shape Shape, from RestoreFrom) (info Info, lost []string, ok bool, err error) {
	if from.Image != nil || req.Home != "" || len(req.Env) != 0 || req.Environment != "" || req.Machine || !t.spares.fits(shape.Imports, shape.Limits) {
		return Info{}, nil, false, nil
	}
	spare := t.takeSpare(shape.Backend)
	if spare == nil {
		return Info{}, nil, false, nil
	}
	t.mu.Lock()
	err = t.roomLocked(req.Owner)
	if err == nil {
		err = t.backFreeLocked(from.Back)
	}
	if err != nil {
		t.mu.Unlock()
		t.returnSpare(spare)
		return Info{}, nil, true, err
	}
	spare.mu.Lock() // until it is restored, as a new session's start
	t.adoptLocked(spare, req, from.Back)
	t.mu.Unlock()
	err = from.Workspace(spare.dir, spare.uid)
	if err == nil && from.Site != nil {
		err = from.Site(spare.site, spare.uid)
	}
	if err == nil {
		lost, err = restoreInterpreter(spare, from)
	}
	info, err = t.started(spare, err)
	return info, lost, true, err
}

// adoptLocked makes spare the session of req, in the table under a new
// id (or, back from a park, its own), its lifetime counted from now.
// Call with t.mu and spare.mu held.
func (t *Table) adoptLocked(spare *Session, req Request, back *Parked) {
	// Spares start before the service knows its replica id: the
	// session gets its id as it is handed out.
	spare.id = t.opts.NewID()
	spare.owner, spare.req = req.Owner, req
	spare.created, spare.used = time.Now(), time.Now()
	spare.adoptNetwork(req.Network)
	back.identify(spare)
	// Under its id for good: a binding to a secret of the sandbox's own
	// (E2B's rules) resolves by it.
	spare.adoptCredentials(req.Credentials)
	spare.sandbox().Arm(context.Background(), t.cfg.SessionMaxLifetime, t.cfg.SessionMaxLifetime)
	t.byID[spare.id] = spare
}
