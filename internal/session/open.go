package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// Opening a session: its workspace made, its interpreter started.

// Create opens a session of req in the shape the service resolved it
// to: a spare when one fits, else a sandbox started for it. The session
// is in the table from the start, holding its place under
// SANDBOX_MAX_SESSIONS while it boots.
func (t *Table) Create(ctx context.Context, req Request, shape Shape) (Info, error) {
	imports, limits, backend := shape.Imports, shape.Limits, shape.Backend
	var spare *Session
	// Spares are started at /workspace with the default variables, on
	// the host's root; machine spares in their own shape.
	switch {
	case req.Machine:
		if t.spares.fitsMachine(req, backend, imports, limits) {
			spare = takeKept(t.spares.machines)
		}
	case req.Home == "" && len(req.Env) == 0 && req.Environment == "" && t.spares.fits(imports, limits):
		spare = t.takeSpare(backend)
	}
	t.mu.Lock()
	if err := t.roomLocked(req.Owner); err != nil {
		t.mu.Unlock()
		if spare != nil {
			t.returnSpare(spare)
		}
		return Info{}, err
	}
	if spare != nil {
		// A fresh sandbox no one has used: it becomes the caller's, with
		// its lifetime counted from now.
		spare.mu.Lock()
		t.adoptLocked(spare, req, nil)
		t.ExpireAfter(spare, req.Lifetime)
		info := spare.info(t.cfg)
		spare.mu.Unlock()
		t.mu.Unlock()
		return info, nil
	}
	se := t.addLocked(req, shape)
	t.mu.Unlock()
	return t.started(se, t.start(ctx, se, t.opts.Fleet.Start))
}

// roomLocked refuses a session of owner past the owner's share
// (SANDBOX_KEY_MAX_SESSIONS) or past SANDBOX_MAX_SESSIONS; call with t.mu.
func (t *Table) roomLocked(owner string) error {
	if err := t.shareLocked(owner, 1); err != nil {
		return err
	}
	if len(t.byID) >= t.cfg.MaxSessions {
		return fmt.Errorf("%w: %d sessions are open (SANDBOX_MAX_SESSIONS); close one first", ErrTooMany, t.cfg.MaxSessions)
	}
	return nil
}

// shareLocked refuses n more sessions of owner past its share of the
// server (SANDBOX_KEY_MAX_SESSIONS; 0 or less: none): every session of
// its in the table counts, paused ones included. Call with t.mu.
func (t *Table) shareLocked(owner string, n int) error {
	share := t.cfg.KeyMaxSessions
	if share <= 0 {
		return nil
	}
	have := 0
	for _, se := range t.byID {
		if se.owner == owner {
			have++
		}
	}
	switch {
	case have+n <= share:
		return nil
	case n == 1:
		return fmt.Errorf("%w: this key has %d sessions open (paused ones included), its share of this server (SANDBOX_KEY_MAX_SESSIONS=%d); close one first",
			ErrKeyLimit, have, share)
	}
	return fmt.Errorf("%w: %d more sessions would take this key past its share of this server: it has %d open of %d (SANDBOX_KEY_MAX_SESSIONS); ask for at most %d, or close some first",
		ErrKeyLimit, n, have, share, max(share-have, 0))
}

// Room refuses n new sessions of owner that its share of the server
// (SANDBOX_KEY_MAX_SESSIONS) has no room for: what a fork asks before it
// copies anything.
func (t *Table) Room(owner string, n int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shareLocked(owner, n)
}

// addLocked puts a new session of req in the table, holding its place
// while it starts, and returns it with its run lock held (so the reaper
// does not take a session that boots slower than its idle TTL, gVisor's,
// for an idle one). Call with t.mu.
func (t *Table) addLocked(req Request, shape Shape) *Session {
	se := t.newSession(req, shape)
	se.mu.Lock()
	t.byID[se.id] = se
	return se
}

// started ends a new session's start, err its outcome: its lifetime
// begins, its run lock is released, and a session that failed to start
// is dropped.
func (t *Table) started(se *Session, err error) (Info, error) {
	se.used = time.Now()
	if err == nil {
		t.ExpireAfter(se, se.req.Lifetime)
		fields := map[string]string{"backend": se.backend}
		if se.env.Name != "" {
			fields["environment"] = se.env.Name
		}
		se.Log(LevelInfo, "session started", fields)
	}
	se.mu.Unlock()
	if err != nil {
		t.Drop(se)
		return Info{}, err
	}
	return se.info(t.cfg), nil
}

// newSession is a session of req in its resolved shape, not yet started.
func (t *Table) newSession(req Request, shape Shape) *Session {
	now := time.Now()
	return &Session{id: t.opts.NewID(), owner: req.Owner, req: req, imports: shape.Imports, limits: shape.Limits,
		created: now, used: now, backend: shape.Backend, env: shape.Env, network: req.Network,
		credentials: req.Credentials, secretsOf: t.opts.Secrets}
}

// launch starts a session's sandbox with a new slot of the budget.
func (t *Table) launch(ctx context.Context, backend string, spec fleet.Spec) (*fleet.Lease, error) {
	return t.opts.Fleet.Start(ctx, backend, spec)
}

// start (re)starts the session's sandbox on its workspace; launch gets
// it from the fleet (a new slot, a spare's, or the session's own). A
// session restored from a snapshot (se.restore) gets its workspace filled
// first and, under gVisor, its sandbox from the memory image.
func (t *Table) start(ctx context.Context, se *Session, launch fleet.Launch) error {
	if se.dir == "" {
		if err := t.makeWorkspace(se); err != nil {
			return err
		}
	}
	work := fleet.Work{Kind: fleet.Session, ID: fleet.NewID(), Interpreter: t.cfg.Interpreter,
		Workspace: se.dir, Site: se.site, Tmp: se.tmp, Layer: t.opts.Layer, HostUID: se.uid, Home: se.req.Home, Vars: se.req.Env,
		Limits: se.limits, Lifetime: t.cfg.SessionMaxLifetime, DataScience: se.imports.Uses(policy.DataScience),
		Machine: se.req.Machine, MachineRoot: se.root, RootInside: fleet.RootInside(se.uid), LoopbackServers: se.req.Servers}.FromEnvironment(se.env)
	se.closeProxy()
	if se.imports.Uses(policy.Network) {
		proxy, fwd, trust := t.opts.Egress(se.id, work.Root, func(host string) {
			if r := se.refused.Load(); r != nil {
				(*r)(host)
			}
		})
		if err := se.useProxy(proxy); err != nil {
			return fmt.Errorf("%w: the session's egress rules: %v", ErrUnavailable, err)
		}
		se.setTrust(trust)
		work.Forward, work.Trust = fwd, trust
		se.proxyPort.Store(int32(fwd.Port))
	}
	work.NetNS = se.netns.Load()
	spec := work.Spec()
	if se.uid != 0 {
		// gVisor's harness starts in the workspace, a machine's init
		// builds its skeleton in its root, and a restore's gofer opens
		// again what the image's kernel held open (the package directory,
		// as root inside's ids where the machine has them): they must be
		// the session's before the sandbox starts.
		for _, d := range []string{se.dir, se.root, se.site, se.tmp} {
			if err := os.Chown(d, se.uid, se.uid); d != "" && err != nil {
				return fmt.Errorf("%w: workspace owner: %v", ErrUnavailable, err)
			}
		}
	}
	// The sandbox outlives the request: its end must not end it. (The
	// wait for a slot is still bounded by the queue timeout.)
	var lease *fleet.Lease
	var err error
	if se.restore != nil && se.restore.Image != nil {
		lease, err = t.opts.Fleet.StartFromImage(context.WithoutCancel(ctx), se.restore.ImageDir, work)
	} else {
		lease, err = launch(context.WithoutCancel(ctx), se.backend, spec)
	}
	if err != nil {
		se.closeProxy()
		return t.opts.StartError(ctx, err)
	}
	se.lease.Store(lease)
	t.holdNetns(se, lease)
	// The workspace belongs to the sandbox's host uid, so the code can write
	// there; the service reaches it as root through wsfs.
	uid := lease.HostUID()
	_ = os.Chown(se.site, uid, uid) // pip_install writes there as the session
	if se.tmp != "" {
		_ = os.Chown(se.tmp, uid, uid)
	}
	if err := os.Chown(se.dir, uid, uid); err != nil && !os.IsPermission(err) {
		lease.Kill(fleet.LimitNone)
		lease.Wait()
		return fmt.Errorf("%w: workspace owner: %v", ErrUnavailable, err)
	}
	se.ended = ""
	return nil
}

// makeWorkspace gives a session that has none its workspace, package
// directory and host uid, and fills the workspace of one restored from a
// snapshot. On failure what it made is undone, except what Drop undoes
// (the claim, and, once set on se, the directories and the uid).
func (t *Table) makeWorkspace(se *Session) error {
	claim, err := claimWorkspaces(t.cfg.StateDir, se.id)
	if err != nil {
		return fmt.Errorf("%w: workspace: %v", ErrUnavailable, err)
	}
	se.claim = claim // Drop releases it
	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	dir, quota, err := newWorkspace(t.cfg.StateDir, se.id, t.cfg.WorkspaceMax)
	if err != nil {
		return fmt.Errorf("%w: workspace: %v", ErrUnavailable, err)
	}
	undo = append(undo, func() { removeWorkspace(dir) })
	site, _, err := newWorkspace(t.cfg.StateDir, se.id+".site", t.cfg.PipMaxInstall)
	if err != nil {
		return fmt.Errorf("%w: package directory: %v", ErrUnavailable, err)
	}
	undo = append(undo, func() { removeWorkspace(site) })
	tmp := ""
	if se.backend == fleet.Native {
		// One /tmp for the interpreter and the commands, as on a machine;
		// a gVisor sandbox's own /tmp is part of its memory image.
		if tmp, err = newTmp(t.cfg.StateDir, se.id, t.cfg.TmpSize); err != nil {
			return fmt.Errorf("%w: /tmp: %v", ErrUnavailable, err)
		}
		undo = append(undo, func() { removeWorkspace(tmp) })
	}
	var root string
	if se.req.Machine && (se.backend == fleet.Native || t.gvisorOwnRoot(se)) {
		// The machine's own /, beside its workspace, of the workspace's
		// size (docs/sessions.md).
		if root, _, err = newWorkspace(t.cfg.StateDir, se.id+rootSuffix, t.cfg.WorkspaceMax); err != nil {
			return fmt.Errorf("%w: the machine's root: %v", ErrUnavailable, err)
		}
		undo = append(undo, func() { removeWorkspace(root) })
		if err := os.Chmod(root, 0o755); err != nil { // a / as any computer's
			return fmt.Errorf("%w: the machine's root: %v", ErrUnavailable, err)
		}
	}
	uid, err := t.holdUID(se)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if root != "" && se.backend != fleet.Native && !fleet.RootInside(uid) {
		// No block of ids (none left): its root is in its memory, as
		// before root inside.
		removeWorkspace(root)
		root = ""
	}
	undo = nil       // from here Drop removes them and releases the uid
	se.lifeMu.Lock() // commands read them without mu
	se.dir, se.site, se.tmp, se.quota, se.uid = dir, site, tmp, quota, uid
	se.root = root
	se.lifeMu.Unlock()
	if se.restore != nil {
		if err := se.restore.Workspace(se.dir, uid); err != nil {
			return err
		}
		if se.restore.Site != nil {
			if err := se.restore.Site(se.site, uid); err != nil {
				return err
			}
		}
		if se.restore.Root != nil && se.root != "" {
			return se.restore.Root(se.root, uid)
		}
	}
	return nil
}

// gvisorOwnRoot reports whether se, a gVisor machine, runs on a root of
// its own on the host, as a native one does: with root inside (its block
// maps the writer's and gofer's ids), not restored from a memory image
// whose root's writes are in the image itself (an older codecage's).
func (t *Table) gvisorOwnRoot(se *Session) bool {
	if os.Geteuid() != 0 || !t.cfg.MachineRoot {
		return false
	}
	if se.restore != nil && se.restore.Image != nil {
		return se.restore.Image.RootInside && se.restore.Image.OwnRoot
	}
	return true
}

// holdUID holds the host uid se's sandboxes run as (0 rootless).
func (t *Table) holdUID(se *Session) (uid int, err error) {
	switch {
	case se.restore != nil && se.restore.Image != nil && se.restore.Image.RootInside:
		// Its kernel maps the image's block: hold all of it.
		return se.restore.Image.UID, fleet.HoldMachineIDs(se.restore.Image.UID)
	case se.restore != nil && se.restore.Image != nil:
		// Every sandbox restored from a memory image runs as its uid.
		return se.restore.Image.UID, fleet.HoldUID(se.restore.Image.UID)
	case os.Geteuid() != 0:
		return 0, nil
	case se.req.Machine && t.cfg.MachineRoot:
		// A machine's user, of a block of ids of its own: root and the
		// users its programs add are its ids too (root inside).
		if uid, ok, err := fleet.ReserveMachineIDs(); ok {
			return uid, err
		}
	}
	// One identity for the session's interpreters and commands: each
	// can change the files the others wrote.
	return fleet.ReserveUID()
}

// newTmp makes a session's /tmp, <id>.tmp beside its workspace: a tmpfs
// of size as root (the size of a sandbox's own /tmp), world-writable and
// sticky as a /tmp is.
func newTmp(stateDir, id string, size int64) (string, error) {
	dir, _, err := newWorkspace(stateDir, id+tmpSuffix, size)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		removeWorkspace(dir)
		return "", err
	}
	return dir, nil
}

// tmpSuffix names a session's /tmp beside its workspace; rootSuffix a
// machine session's own /.
const (
	tmpSuffix  = ".tmp"
	rootSuffix = ".root"
)

// newWorkspace makes a session's workspace directory. As root it is a tmpfs
// of its own, so the kernel enforces the size quota for the code's writes
// as well as the file API's; it reports whether it is.
func newWorkspace(stateDir, id string, size int64) (string, bool, error) {
	dir := filepath.Join(stateDir, "sessions", id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return "", false, err
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", false, err
	}
	mounted, err := mountWorkspace(dir, size)
	if err != nil {
		os.Remove(dir)
		return "", false, err
	}
	return dir, mounted, nil
}
