package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/envs"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/snapstore"
	"github.com/codecage/codecage/internal/wsfs"
)

// Snapshots: a session written into the snapshot store (internal/snapstore:
// sealed, per-owner limits, a TTL) as three blobs: its workspace (a tar),
// and its interpreter's state (natively, "state": the pickled globals) or
// its memory image (gVisor, "memory": runsc's image directory as a tar).
// New sessions start from one; a fork is a snapshot that is deleted once
// its copies have started.

// Blob names in the store.
const (
	blobWorkspace = "workspace"
	blobState     = "state"
	blobMemory    = "memory"
	blobSite      = "site" // the packages pip_install put in the session
	blobLog       = "log"  // a parked session's log (JSON)
	blobRoot      = "root" // a machine session's own root
)

// snapshotSpec is the session a snapshot was made of, as its copies are
// opened: the manifest's opaque spec.
type snapshotSpec struct {
	Profiles       []string          `json:"profiles,omitempty"`
	AllowedImports []string          `json:"allowed_imports,omitempty"`
	MemoryBytes    int64             `json:"memory_bytes,omitempty"`
	Home           string            `json:"home,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Template       string            `json:"template,omitempty"`
	// Environment is the environment the session started from, by name
	// and content ID (envpersist.go: a copy starts on that content only;
	// no ID: a snapshot made before IDs were kept, the name is followed).
	Environment   string `json:"environment,omitempty"`
	EnvironmentID string `json:"environment_id,omitempty"`
	// Installed are the modules pip_install put in the session.
	Installed []string `json:"installed,omitempty"`
	// Network are its egress rules when it was saved.
	Network *egress.NetworkRules `json:"network,omitempty"`
	// Credentials are its credential bindings: names of secrets, never
	// their values. A copy's are resolved under its own owner and id, so
	// it gets its owner's secrets, and none of those its original was
	// given at its create.
	Credentials []egress.Binding `json:"egress_credentials,omitempty"`
	// Machine: it was a machine session, and so are its copies.
	Machine bool `json:"machine,omitempty"`
}

// snapshotStore is the store, opened when a snapshot is first asked for
// (a database that is down then is an error of that request, not of the
// server's start); uids are the image uids this process holds for the
// gVisor snapshots it made, by snapshot id.
type snapshotStore struct {
	mu   sync.Mutex
	st   *snapstore.Store
	uids map[string]int
}

// snapshots is the store, opened on first use.
func (p *Persist) snapshots(ctx context.Context) (*snapstore.Store, error) {
	p.snaps.mu.Lock()
	defer p.snaps.mu.Unlock()
	if p.snaps.st != nil {
		return p.snaps.st, nil
	}
	dir, dsn, secretFile := p.cfg.SnapshotPlace()
	st, err := snapstore.Open(ctx, snapstore.Options{Dir: dir, DSN: dsn, Secret: p.cfg.SnapshotSecret, SecretFile: secretFile,
		MaxBytes: p.cfg.SnapshotMaxBytes, MaxCount: p.cfg.SnapshotMaxCount, TTL: p.cfg.SnapshotTTL,
		TempDir: filepath.Join(p.cfg.StateDir, "images")})
	if err != nil {
		return nil, errdefs.Snapshot(err)
	}
	p.snaps.st, p.snaps.uids = st, map[string]int{}
	return st, nil
}

// Close closes the store (service shutdown).
func (p *Persist) Close() {
	p.snaps.mu.Lock()
	defer p.snaps.mu.Unlock()
	if p.snaps.st != nil {
		_ = p.snaps.st.Close()
		p.snaps.st = nil
	}
	// The image uids go as they would with the process: the next service
	// checks them again when it restores (checkImageUID).
	for id, uid := range p.snaps.uids {
		fleet.ReleaseUID(uid)
		delete(p.snaps.uids, id)
	}
}

// workspaceLimits bound a workspace's archive and its unpacking: the
// workspace's own size, with room for the tar's headers. Its files'
// metadata comes along, as a write of metadata bounds it.
func (p *Persist) workspaceLimits() wsfs.ArchiveLimits {
	return wsfs.ArchiveLimits{MaxBytes: p.cfg.WorkspaceMax + p.cfg.WorkspaceMax/8 + 1<<20, MaxEntries: 1 << 20, MaxDepth: 256,
		Metadata: p.o.Metadata, Owners: fleet.BlockOwners}
}

// unpackLimits are lim for an unpack as uid: the owners an archive kept
// (root's files, the users it added) only for a machine with root inside,
// whose block holds them; anyone else gets every file.
func unpackLimits(lim wsfs.ArchiveLimits, uid int) wsfs.ArchiveLimits {
	if !fleet.RootInside(uid) {
		lim.Owners = wsfs.OwnerWindow{}
	}
	return lim
}

// rootLimits bound a machine's own root's archive and its unpacking, as
// a workspace's; the overlays' upper layers in it (root's changes to
// /usr and /etc) keep their whiteouts and opaque directories, so that
// what root removed stays removed in a copy.
func (p *Persist) rootLimits() wsfs.ArchiveLimits {
	lim := p.workspaceLimits()
	lim.Whiteouts = true
	return lim
}

// siteLimits bound a session's package directory's archive and its
// unpacking.
func (p *Persist) siteLimits() wsfs.ArchiveLimits {
	return wsfs.ArchiveLimits{MaxBytes: p.cfg.PipMaxInstall + p.cfg.PipMaxInstall/8 + 1<<20, MaxEntries: 1 << 20, MaxDepth: 256}
}

// stateOptions bound a native state's snapshot and restore.
func (p *Persist) stateOptions(allowed []string) fleet.StateOptions {
	return fleet.StateOptions{MaxBytes: p.cfg.SnapshotMaxBytes, AllowedImports: allowed}
}

// tempDir is a new directory for a memory image on its way to or from
// the store, under the state directory (the same file system as the
// sandboxes' bundles).
func (p *Persist) tempDir() (string, error) {
	base := filepath.Join(p.cfg.StateDir, "images")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp(base, "img-")
	if err != nil {
		return "", fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return dir, nil
}

// Save writes session se into the store as a snapshot of owner.
func (p *Persist) Save(ctx context.Context, se *session.Session, owner, name string) (*SnapshotInfo, error) {
	req := se.Request()
	spec, _ := json.Marshal(specOf(req, se.Environment()))
	m := snapstore.Manifest{Kind: snapstore.KindSnapshot, Owner: owner, Name: name, SessionID: se.ID(),
		Backend: se.Backend(), Profiles: se.Imports().Profiles, Spec: spec}
	m, err := p.storeSession(ctx, m, func(to session.SnapshotTo, seal func(session.Capture, json.RawMessage) error) error {
		c, err := p.sessions.Snapshot(ctx, se, to)
		if err != nil {
			return err
		}
		sp := specOf(req, se.Environment())
		sp.Installed = c.Installed
		spec, _ := json.Marshal(sp)
		return seal(c, spec)
	})
	if err != nil {
		return nil, err
	}
	info := snapshotInfo(m)
	return &info, nil
}

// specOf is what a snapshot keeps of a session's request, and of the
// environment it got (env).
func specOf(req session.Request, env envstore.Env) snapshotSpec {
	return snapshotSpec{Profiles: req.Profiles, AllowedImports: req.AllowedImports, MemoryBytes: req.MemoryBytes,
		Home: req.Home, Env: req.Env, Labels: req.Labels, Template: req.Template, Environment: req.Environment, EnvironmentID: env.ID,
		Network: req.Network, Credentials: req.Credentials, Machine: req.Machine}
}

// storeSession writes a session into the store under manifest m: capture
// fills the blobs through to (the session table's Snapshot or Park), and
// hands what it saved to seal, which adds the memory image and commits
// (with spec, when not nil, as the manifest's).
// A gVisor image's uid stays held while the snapshot lives (every
// session started from it runs as that uid; Delete lets go).
func (p *Persist) storeSession(ctx context.Context, m snapstore.Manifest, capture func(session.SnapshotTo, func(session.Capture, json.RawMessage) error) error) (snapstore.Manifest, error) {
	st, err := p.snapshots(ctx)
	if err != nil {
		return m, err
	}
	w, err := st.Create(ctx, m)
	if err != nil {
		return m, errdefs.Snapshot(err)
	}
	defer w.Abort() // nothing, once committed
	// archive writes a directory out as one of the snapshot's blobs.
	archive := func(blob string, limits wsfs.ArchiveLimits) func(string) error {
		return func(dir string) error {
			bw, err := w.Blob(blob)
			if err != nil {
				return err
			}
			_, err = wsfs.Archive(ctx, dir, bw, limits)
			return err
		}
	}
	to := session.SnapshotTo{StateOpts: p.stateOptions(nil), Workspace: archive(blobWorkspace, p.workspaceLimits()),
		Site: archive(blobSite, p.siteLimits()), Root: archive(blobRoot, p.rootLimits())}
	if m.Backend == fleet.GVisor {
		// runsc writes the image into the store in place (images.go).
		if to.ImageDir, err = w.Files(blobMemory); err != nil {
			return m, errdefs.Snapshot(err)
		}
	} else if to.State, err = w.Blob(blobState); err != nil {
		return m, errdefs.Snapshot(err)
	}
	var out snapstore.Manifest
	seal := func(c session.Capture, spec json.RawMessage) error {
		if spec != nil {
			if err := w.SetSpec(spec); err != nil {
				return err
			}
		}
		if len(c.Log) > 0 {
			bw, err := w.Blob(blobLog)
			if err != nil {
				return err
			}
			if err := json.NewEncoder(bw).Encode(c.Log); err != nil {
				return err
			}
		}
		var runsc, platform string
		uid := -1
		if c.Image != nil {
			runsc, platform, uid = c.Image.RunscVersion, c.Image.Platform, c.Image.UID
		}
		w.Describe(runsc, platform, int64(uid), c.NotSaved)
		if out, err = w.Commit(); err != nil {
			if uid >= 0 {
				fleet.ReleaseUID(uid)
			}
			return err
		}
		if uid >= 0 {
			p.snaps.mu.Lock()
			p.snaps.uids[out.ID] = uid
			p.snaps.mu.Unlock()
		}
		return nil
	}
	if err := capture(to, seal); err != nil {
		return m, errdefs.Snapshot(err)
	}
	return out, nil
}

func snapshotInfo(m snapstore.Manifest) SnapshotInfo {
	return SnapshotInfo{ID: m.ID, Name: m.Name, SessionID: m.SessionID, Backend: m.Backend, CreatedAt: m.Created, ExpiresAt: m.Expires,
		SizeBytes: m.Size, NotSaved: m.NotSaved}
}

// Restore opens a session of req from the owner's snapshot
// req.FromSnapshot: the snapshot's session's shape (profiles, memory,
// home, environment), the caller's lifetime, labels and resume choices.
func (p *Persist) Restore(ctx context.Context, req session.Request) (*session.Info, error) {
	return p.restoreOf(ctx, req, envstore.Env{})
}

// restoreOf is Restore for a copy of a live session
// whose environment is live (a native fork).
func (p *Persist) restoreOf(ctx context.Context, req session.Request, live envstore.Env) (*session.Info, error) {
	st, err := p.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	// The whole snapshot is verified before any byte of it is used; its
	// blobs are read within this context.
	snap, err := st.Get(ctx, req.Owner, req.FromSnapshot)
	if err != nil {
		return nil, errdefs.Snapshot(err)
	}
	defer snap.Close()
	if snap.Manifest().Kind != snapstore.KindSnapshot {
		return nil, fmt.Errorf("%w: %s", errdefs.ErrSnapshotNotFound, bounded.Quote(req.FromSnapshot))
	}
	return p.openSnapshot(ctx, req, snap, nil, live)
}

// openSnapshot opens a session of req from snap: a new one, or the
// parked session back brings back; live as for snapshotShape.
func (p *Persist) openSnapshot(ctx context.Context, req session.Request, snap *snapstore.Snapshot, back *session.Parked, live envstore.Env) (*session.Info, error) {
	m := snap.Manifest()
	req, shape, release, err := p.snapshotShape(req, m, live)
	if err != nil {
		return nil, err
	}
	defer release() // the session is in the table by then, where the collector finds it
	imports := shape.Imports
	// unpack fills a directory from one of the snapshot's blobs.
	unpack := func(blob, what string, limits wsfs.ArchiveLimits) func(string, int) error {
		return func(dir string, uid int) error {
			r, err := snap.Blob(blob)
			if err != nil {
				return errdefs.Snapshot(err)
			}
			if err := wsfs.Unpack(ctx, dir, r, uid, unpackLimits(limits, uid)); err != nil {
				return fmt.Errorf("%w: its %s: %v", errdefs.ErrSnapshotUnusable, what, err)
			}
			return nil
		}
	}
	from := session.RestoreFrom{StateOpts: p.stateOptions(imports.Modules), Workspace: unpack(blobWorkspace, "workspace", p.workspaceLimits())}
	if hasBlob(m, blobSite) { // snapshots made before packages were kept have none
		from.Site = unpack(blobSite, "packages", p.siteLimits())
	}
	if hasBlob(m, blobRoot) { // a machine's own root
		from.Root = unpack(blobRoot, "root", p.rootLimits())
	}
	var image *snapstore.FileSet
	if m.Backend == fleet.GVisor && (back == nil || !back.Cold) {
		if image, err = p.imageFiles(snap); err != nil {
			return nil, err
		}
		defer image.Close()
		from.ImageDir = image.Dir
		img, err := fleet.ReadImage(from.ImageDir)
		if err != nil {
			return nil, errdefs.Snapshot(err)
		}
		if int64(img.UID) != m.UID {
			return nil, fmt.Errorf("%w: its image runs as uid %d, its manifest says %d", errdefs.ErrSnapshotUnusable, img.UID, m.UID)
		}
		if err := p.checkImageUID(m.ID, img.UID); err != nil {
			return nil, err
		}
		from.Image = &img
	} else if back == nil || !back.Cold {
		if from.State, err = snap.Blob(blobState); err != nil {
			return nil, errdefs.Snapshot(err)
		}
	}
	if back != nil && hasBlob(m, blobLog) {
		if back.Log, err = readLog(snap); err != nil {
			return nil, err
		}
	}
	from.Back = back
	var spec snapshotSpec
	_ = json.Unmarshal(m.Spec, &spec) // read already by snapshotShape
	from.Installed = spec.Installed
	info, lost, err := p.sessions.CreateFrom(ctx, req, shape, from)
	if err != nil {
		return nil, errdefs.Snapshot(err)
	}
	if err := p.imageLoaded(image, info.ID, req.Owner); err != nil {
		return nil, err
	}
	if len(lost) > 0 {
		p.log().Info("session started from a snapshot without part of its state", "session", info.ID, "snapshot", m.ID, "not_restored", len(lost))
	}
	if err := p.o.StartEnvironment(ctx, info.ID, req.Owner, shape.Env); err != nil {
		return nil, err
	}
	return &info, nil
}

// snapshotShape is the request and shape of a session started from the
// snapshot m: its session's profiles, memory, home and environment, on
// its backend; the caller's lifetime, resume choices, labels and template.
// live is the saved session's environment when it still runs (a fork).
// release ends the use of the environment the shape holds (call it once
// the session is in the table, or has failed to start).
func (p *Persist) snapshotShape(req session.Request, m snapstore.Manifest, live envstore.Env) (session.Request, session.Shape, func(), error) {
	none := func() {}
	var spec snapshotSpec
	if err := json.Unmarshal(m.Spec, &spec); err != nil {
		return req, session.Shape{}, none, fmt.Errorf("%w: its description: %v", errdefs.ErrSnapshotUnusable, err)
	}
	req.Profiles, req.AllowedImports, req.MemoryBytes, req.Home, req.Env = spec.Profiles, spec.AllowedImports, spec.MemoryBytes, spec.Home, spec.Env
	req.Environment = spec.Environment
	req.Machine = req.Machine || spec.Machine
	req.UseContainer = m.Backend == fleet.GVisor
	if req.Labels == nil {
		req.Labels = spec.Labels
	}
	if req.Template == "" {
		req.Template = spec.Template
	}
	if req.Network == nil {
		req.Network = spec.Network // the saved session's rules hold over its copies
	}
	if req.Credentials == nil {
		req.Credentials = spec.Credentials
	}
	backend, err := p.o.Backend(req.UseContainer)
	if err != nil {
		return req, session.Shape{}, none, err
	}
	if backend != m.Backend {
		return req, session.Shape{}, none, fmt.Errorf("%w: made on the %s backend; this server runs %s sessions", errdefs.ErrSnapshotUnusable, m.Backend, backend)
	}
	imports, err := p.o.Imports(req.Profiles, req.AllowedImports)
	if err != nil {
		return req, session.Shape{}, none, fmt.Errorf("%w: %v", errdefs.ErrSnapshotUnusable, err)
	}
	limits, err := p.o.Shape(req, imports)
	if err != nil {
		return req, session.Shape{}, none, err
	}
	// The environment its session had, by content (envpersist.go).
	env, release, err := p.snapshotEnvironment(spec, live)
	if err != nil {
		return req, session.Shape{}, none, err
	}
	imports = envs.WithModules(imports, env)
	req = envs.WithStartCommand(req, env)
	return req, session.Shape{Imports: imports, Limits: limits, Backend: backend, Env: env}, release, nil
}

// checkImageUID refuses to restore an image whose uid this process holds
// for something else: an image made by an earlier process or another
// replica, whose uid went to an unrelated session here meanwhile.
func (p *Persist) checkImageUID(id string, uid int) error {
	p.snaps.mu.Lock()
	mine := p.snaps.uids[id] == uid
	p.snaps.mu.Unlock()
	if !mine && fleet.UIDHeld(uid) {
		return fmt.Errorf("%w: the snapshot's sandbox ran as host uid %d, which another sandbox here uses now; try again later", errdefs.ErrUnavailable, uid)
	}
	return nil
}

// List lists the owner's snapshots (of the named kind), newest first,
// narrowed by f.
func (p *Persist) List(ctx context.Context, owner string, f SnapshotFilter) ([]SnapshotInfo, error) {
	st, err := p.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	ms, err := st.List(ctx, owner)
	if err != nil {
		return nil, errdefs.Snapshot(err)
	}
	out := []SnapshotInfo{}
	for _, m := range ms {
		if m.Kind != snapstore.KindSnapshot || (f.SessionID != "" && m.SessionID != f.SessionID) ||
			(f.Name != "" && m.Name != f.Name && m.ID != f.Name && !strings.HasPrefix(f.Name, m.ID+":")) {
			continue
		}
		out = append(out, snapshotInfo(m))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// Delete deletes one of the owner's snapshots, and lets go of its
// image's uid.
func (p *Persist) Delete(ctx context.Context, owner, id string) error {
	st, err := p.snapshots(ctx)
	if err != nil {
		return err
	}
	if err := st.Delete(ctx, owner, id); err != nil {
		return errdefs.Snapshot(err)
	}
	p.snaps.mu.Lock()
	uid, ok := p.snaps.uids[id]
	delete(p.snaps.uids, id)
	p.snaps.mu.Unlock()
	if ok {
		fleet.ReleaseUID(uid)
	}
	return nil
}

// hasBlob reports whether snapshot m has the named blob.
func hasBlob(m snapstore.Manifest, name string) bool {
	for _, b := range m.Blobs {
		if b.Name == name {
			return true
		}
	}
	return false
}

// maxLogBlob bounds a parked session's log as read back: its ring's worth
// of entries, each capped, with room to spare.
const maxLogBlob = 2 << 20

// readLog reads a parked session's log; the session caps each entry again.
func readLog(snap *snapstore.Snapshot) ([]session.LogEntry, error) {
	r, err := snap.Blob(blobLog)
	if err != nil {
		return nil, errdefs.Snapshot(err)
	}
	// Read to its end, where the store checks its MAC.
	b, err := io.ReadAll(io.LimitReader(r, maxLogBlob+1))
	if err != nil {
		return nil, errdefs.Snapshot(err)
	}
	var log []session.LogEntry
	if len(b) > maxLogBlob || json.Unmarshal(b, &log) != nil {
		return nil, fmt.Errorf("%w: its log is not the log it was parked with", errdefs.ErrSnapshotUnusable)
	}
	return log, nil
}
