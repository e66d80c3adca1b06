package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
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

func (s *Service) snapshots(ctx context.Context) (*snapstore.Store, error) {
	s.snaps.mu.Lock()
	defer s.snaps.mu.Unlock()
	if s.snaps.st != nil {
		return s.snaps.st, nil
	}
	dir, dsn, secretFile := s.cfg.SnapshotPlace()
	st, err := snapstore.Open(ctx, snapstore.Options{Dir: dir, DSN: dsn, Secret: s.cfg.SnapshotSecret, SecretFile: secretFile,
		MaxBytes: s.cfg.SnapshotMaxBytes, MaxCount: s.cfg.SnapshotMaxCount, TTL: s.cfg.SnapshotTTL,
		TempDir: filepath.Join(s.cfg.StateDir, "images")})
	if err != nil {
		return nil, snapshotErr(err)
	}
	s.snaps.st, s.snaps.uids = st, map[string]int{}
	return st, nil
}

// closeSnapshots closes the store (service shutdown).
func (s *Service) closeSnapshots() {
	s.snaps.mu.Lock()
	defer s.snaps.mu.Unlock()
	if s.snaps.st != nil {
		_ = s.snaps.st.Close()
		s.snaps.st = nil
	}
	// The image uids go as they would with the process: the next service
	// checks them again when it restores (checkImageUID).
	for id, uid := range s.snaps.uids {
		fleet.ReleaseUID(uid)
		delete(s.snaps.uids, id)
	}
}

// snapshotErr classifies a failure of the store or of a saved state.
func snapshotErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, snapstore.ErrNotFound):
		return as(ErrSnapshotNotFound, err)
	case errors.Is(err, snapstore.ErrLimit), errors.Is(err, fleet.ErrStateTooLarge):
		return as(ErrTooLarge, err)
	case errors.Is(err, snapstore.ErrTampered), errors.Is(err, fleet.ErrImageMismatch), errors.Is(err, fleet.ErrBadImage),
		errors.Is(err, fleet.ErrStateRefused):
		return as(ErrSnapshotUnusable, err)
	case errors.Is(err, snapstore.ErrInvalid), errors.Is(err, snapstore.ErrExists):
		return as(ErrInvalidRequest, err)
	case errors.Is(err, snapstore.ErrUnavailable), errors.Is(err, snapstore.ErrNoSecret):
		return as(ErrUnavailable, err)
	}
	return err
}

// as is err classified as kind, its text not repeating kind's
// ("snapshot not found: snapshot not found: x" is "snapshot not found: x").
func as(kind, err error) error {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, kind.Error()); ok {
		return fmt.Errorf("%w%s", kind, rest)
	}
	return fmt.Errorf("%w: %s", kind, msg)
}

// workspaceLimits bound a workspace's archive and its unpacking: the
// workspace's own size, with room for the tar's headers. Its files'
// metadata comes along, as a write of metadata bounds it.
func (s *Service) workspaceLimits() wsfs.ArchiveLimits {
	return wsfs.ArchiveLimits{MaxBytes: s.cfg.WorkspaceMax + s.cfg.WorkspaceMax/8 + 1<<20, MaxEntries: 1 << 20, MaxDepth: 256,
		Metadata: wsfs.MetaLimits{Keys: MaxMetadataKeys, Bytes: MaxMetadataBytes}}
}

// siteLimits bound a session's package directory's archive and its
// unpacking.
func (s *Service) siteLimits() wsfs.ArchiveLimits {
	return wsfs.ArchiveLimits{MaxBytes: s.cfg.PipMaxInstall + s.cfg.PipMaxInstall/8 + 1<<20, MaxEntries: 1 << 20, MaxDepth: 256}
}

// stateOptions bound a native state's snapshot and restore.
func (s *Service) stateOptions(allowed []string) fleet.StateOptions {
	return fleet.StateOptions{MaxBytes: s.cfg.SnapshotMaxBytes, AllowedImports: allowed}
}

// tempDir is a new directory for a memory image on its way to or from
// the store, under the state directory (the same file system as the
// sandboxes' bundles).
func (s *Service) tempDir() (string, error) {
	base := filepath.Join(s.cfg.StateDir, "images")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	dir, err := os.MkdirTemp(base, "img-")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return dir, nil
}

// saveSnapshot writes session se into the store as a snapshot of owner.
func (s *Service) saveSnapshot(ctx context.Context, se *session.Session, owner, name string) (*SnapshotInfo, error) {
	req := se.Request()
	spec, _ := json.Marshal(specOf(req, se.Environment()))
	m := snapstore.Manifest{Kind: snapstore.KindSnapshot, Owner: owner, Name: name, SessionID: se.ID(),
		Backend: se.Backend(), Profiles: se.Imports().Profiles, Spec: spec}
	m, err := s.storeSession(ctx, m, func(to session.SnapshotTo, seal func(session.Capture, json.RawMessage) error) error {
		c, err := s.sessions.Snapshot(ctx, se, to)
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
		Home: req.Home, Env: req.Env, Labels: req.Labels, Template: req.Template, Environment: req.Environment, EnvironmentID: env.ID}
}

// storeSession writes a session into the store under manifest m: capture
// fills the blobs through to (the session table's Snapshot or Park), and
// hands what it saved to seal, which adds the memory image and commits
// (with spec, when not nil, as the manifest's).
// A gVisor image's uid stays held while the snapshot lives (every
// session started from it runs as that uid; deleteSnapshot lets go).
func (s *Service) storeSession(ctx context.Context, m snapstore.Manifest, capture func(session.SnapshotTo, func(session.Capture, json.RawMessage) error) error) (snapstore.Manifest, error) {
	st, err := s.snapshots(ctx)
	if err != nil {
		return m, err
	}
	w, err := st.Create(ctx, m)
	if err != nil {
		return m, snapshotErr(err)
	}
	defer w.Abort() // nothing, once committed
	to := session.SnapshotTo{StateOpts: s.stateOptions(nil), Workspace: func(dir string) error {
		bw, err := w.Blob(blobWorkspace)
		if err != nil {
			return err
		}
		_, err = wsfs.Archive(ctx, dir, bw, s.workspaceLimits())
		return err
	}, Site: func(dir string) error {
		bw, err := w.Blob(blobSite)
		if err != nil {
			return err
		}
		_, err = wsfs.Archive(ctx, dir, bw, s.siteLimits())
		return err
	}}
	if m.Backend == fleet.GVisor {
		// runsc writes the image into the store in place (images.go).
		if to.ImageDir, err = w.Files(blobMemory); err != nil {
			return m, snapshotErr(err)
		}
	} else if to.State, err = w.Blob(blobState); err != nil {
		return m, snapshotErr(err)
	}
	var out snapstore.Manifest
	seal := func(c session.Capture, spec json.RawMessage) error {
		if spec != nil {
			if err := w.SetSpec(spec); err != nil {
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
			s.snaps.mu.Lock()
			s.snaps.uids[out.ID] = uid
			s.snaps.mu.Unlock()
		}
		return nil
	}
	if err := capture(to, seal); err != nil {
		return m, snapshotErr(err)
	}
	return out, nil
}

func snapshotInfo(m snapstore.Manifest) SnapshotInfo {
	return SnapshotInfo{ID: m.ID, Name: m.Name, SessionID: m.SessionID, Backend: m.Backend, CreatedAt: m.Created, ExpiresAt: m.Expires,
		SizeBytes: m.Size, NotSaved: m.NotSaved}
}

// openFromSnapshot opens a session of req from the owner's snapshot
// req.FromSnapshot: the snapshot's session's shape (profiles, memory,
// home, environment), the caller's lifetime, labels and resume choices.
func (s *Service) openFromSnapshot(ctx context.Context, req SessionRequest) (*SessionInfo, error) {
	return s.openFromSnapshotOf(ctx, req, envstore.Env{})
}

// openFromSnapshotOf is openFromSnapshot for a copy of a live session
// whose environment is live (a native fork).
func (s *Service) openFromSnapshotOf(ctx context.Context, req SessionRequest, live envstore.Env) (*SessionInfo, error) {
	st, err := s.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	// The whole snapshot is verified before any byte of it is used; its
	// blobs are read within this context.
	snap, err := st.Get(ctx, req.Owner, req.FromSnapshot)
	if err != nil {
		return nil, snapshotErr(err)
	}
	defer snap.Close()
	if snap.Manifest().Kind != snapstore.KindSnapshot {
		return nil, fmt.Errorf("%w: %s", ErrSnapshotNotFound, Quote(req.FromSnapshot))
	}
	return s.openSnapshot(ctx, req, snap, nil, live)
}

// openSnapshot opens a session of req from snap: a new one, or the
// parked session back brings back; live as for snapshotShape.
func (s *Service) openSnapshot(ctx context.Context, req SessionRequest, snap *snapstore.Snapshot, back *session.Parked, live envstore.Env) (*SessionInfo, error) {
	m := snap.Manifest()
	req, shape, release, err := s.snapshotShape(req, m, live)
	if err != nil {
		return nil, err
	}
	defer release() // the session is in the table by then, where the collector finds it
	imports := shape.Imports
	from := session.RestoreFrom{StateOpts: s.stateOptions(imports.Modules), Workspace: func(dir string, uid int) error {
		r, err := snap.Blob(blobWorkspace)
		if err != nil {
			return snapshotErr(err)
		}
		if err := wsfs.Unpack(ctx, dir, r, uid, s.workspaceLimits()); err != nil {
			return fmt.Errorf("%w: its workspace: %v", ErrSnapshotUnusable, err)
		}
		return nil
	}}
	if hasBlob(m, blobSite) { // snapshots made before packages were kept have none
		from.Site = func(dir string, uid int) error {
			r, err := snap.Blob(blobSite)
			if err != nil {
				return snapshotErr(err)
			}
			if err := wsfs.Unpack(ctx, dir, r, uid, s.siteLimits()); err != nil {
				return fmt.Errorf("%w: its packages: %v", ErrSnapshotUnusable, err)
			}
			return nil
		}
	}
	var image *snapstore.FileSet
	if m.Backend == fleet.GVisor && (back == nil || !back.Cold) {
		if image, err = s.imageFiles(snap); err != nil {
			return nil, err
		}
		defer image.Close()
		from.ImageDir = image.Dir
		img, err := fleet.ReadImage(from.ImageDir)
		if err != nil {
			return nil, snapshotErr(err)
		}
		if int64(img.UID) != m.UID {
			return nil, fmt.Errorf("%w: its image runs as uid %d, its manifest says %d", ErrSnapshotUnusable, img.UID, m.UID)
		}
		if err := s.checkImageUID(m.ID, img.UID); err != nil {
			return nil, err
		}
		from.Image = &img
	} else if back == nil || !back.Cold {
		if from.State, err = snap.Blob(blobState); err != nil {
			return nil, snapshotErr(err)
		}
	}
	from.Back = back
	var spec snapshotSpec
	_ = json.Unmarshal(m.Spec, &spec) // read already by snapshotShape
	from.Installed = spec.Installed
	info, lost, err := s.sessions.CreateFrom(ctx, req, shape, from)
	if err != nil {
		return nil, snapshotErr(err)
	}
	if err := s.imageLoaded(image, info.ID, req.Owner); err != nil {
		return nil, err
	}
	if len(lost) > 0 {
		s.log().Info("session started from a snapshot without part of its state", "session", info.ID, "snapshot", m.ID, "not_restored", len(lost))
	}
	if err := s.startEnvironmentOrDrop(ctx, info.ID, req.Owner, shape.Env); err != nil {
		return nil, err
	}
	out := SessionInfo(info)
	return &out, nil
}

// snapshotShape is the request and shape of a session started from the
// snapshot m: its session's profiles, memory, home and environment, on
// its backend; the caller's lifetime, resume choices, labels and template.
// live is the saved session's environment when it still runs (a fork).
// release ends the use of the environment the shape holds (call it once
// the session is in the table, or has failed to start).
func (s *Service) snapshotShape(req SessionRequest, m snapstore.Manifest, live envstore.Env) (SessionRequest, session.Shape, func(), error) {
	none := func() {}
	var spec snapshotSpec
	if err := json.Unmarshal(m.Spec, &spec); err != nil {
		return req, session.Shape{}, none, fmt.Errorf("%w: its description: %v", ErrSnapshotUnusable, err)
	}
	req.Profiles, req.AllowedImports, req.MemoryBytes, req.Home, req.Env = spec.Profiles, spec.AllowedImports, spec.MemoryBytes, spec.Home, spec.Env
	req.Environment = spec.Environment
	req.UseContainer = m.Backend == fleet.GVisor
	if req.Labels == nil {
		req.Labels = spec.Labels
	}
	if req.Template == "" {
		req.Template = spec.Template
	}
	backend, err := s.backendFor(req.UseContainer)
	if err != nil {
		return req, session.Shape{}, none, err
	}
	if backend != m.Backend {
		return req, session.Shape{}, none, fmt.Errorf("%w: made on the %s backend; this server runs %s sessions", ErrSnapshotUnusable, m.Backend, backend)
	}
	imports, err := s.resolveImports(req.Profiles, req.AllowedImports)
	if err != nil {
		return req, session.Shape{}, none, fmt.Errorf("%w: %v", ErrSnapshotUnusable, err)
	}
	limits, err := s.limits(Request{MemoryBytes: req.MemoryBytes}, imports.Whole())
	if err != nil {
		return req, session.Shape{}, none, err
	}
	if err := s.checkSessionShape(req); err != nil {
		return req, session.Shape{}, none, err
	}
	// The environment its session had, by content (envpersist.go).
	env, release, err := s.snapshotEnvironment(spec, live)
	if err != nil {
		return req, session.Shape{}, none, err
	}
	imports = withEnvironment(imports, env)
	req = withStartCommand(req, env)
	return req, session.Shape{Imports: imports, Limits: limits, Backend: backend, Env: env}, release, nil
}

// checkImageUID refuses to restore an image whose uid this process holds
// for something else: an image made by an earlier process or another
// replica, whose uid went to an unrelated session here meanwhile.
func (s *Service) checkImageUID(id string, uid int) error {
	s.snaps.mu.Lock()
	mine := s.snaps.uids[id] == uid
	s.snaps.mu.Unlock()
	if !mine && fleet.UIDHeld(uid) {
		return fmt.Errorf("%w: the snapshot's sandbox ran as host uid %d, which another sandbox here uses now; try again later", ErrUnavailable, uid)
	}
	return nil
}

// listSnapshots lists the owner's snapshots (of the named kind), newest
// first, narrowed by f.
func (s *Service) listSnapshots(ctx context.Context, owner string, f SnapshotFilter) ([]SnapshotInfo, error) {
	st, err := s.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	ms, err := st.List(ctx, owner)
	if err != nil {
		return nil, snapshotErr(err)
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

// deleteSnapshot deletes one of the owner's snapshots, and lets go of
// its image's uid.
func (s *Service) deleteSnapshot(ctx context.Context, owner, id string) error {
	st, err := s.snapshots(ctx)
	if err != nil {
		return err
	}
	if err := st.Delete(ctx, owner, id); err != nil {
		return snapshotErr(err)
	}
	s.snaps.mu.Lock()
	uid, ok := s.snaps.uids[id]
	delete(s.snaps.uids, id)
	s.snaps.mu.Unlock()
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
