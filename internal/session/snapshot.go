package session

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/codecage/codecage/internal/fleet"
)

// Snapshots of a session: what it holds written out (its interpreter's
// state and its workspace), and new sessions started from such a copy.
// Where the copy goes (the snapshot store) is the caller's business.
//
// Natively the interpreter's state is its globals, pickled inside the
// sandbox (fleet.Lease.SnapshotState): what cannot be pickled is named,
// not saved. Under gVisor it is the sandbox's memory image, whole.

// SnapshotTo says where a snapshot of a session goes.
type SnapshotTo struct {
	// State receives a native session's interpreter state.
	State     io.Writer
	StateOpts fleet.StateOptions
	// ImageDir is an empty directory for a gVisor session's memory image.
	ImageDir string
	// Workspace writes the workspace at dir out; it is called with the
	// sandbox stopped, so its code changes nothing meanwhile. Site, when
	// set, writes out the packages pip_install put in the session, after.
	Workspace func(dir string) error
	Site      func(dir string) error
	// Root, when set, writes out a machine session's own root (its
	// skeleton included, which a start rebuilds), after.
	Root func(dir string) error
}

// Capture is what a snapshot of a session saved.
type Capture struct {
	Backend string
	// NotSaved names what of a native interpreter's state was not saved,
	// with why.
	NotSaved []string
	// Image is a gVisor session's memory image.
	Image *fleet.MemoryImage
	// Installed are the modules pip_install put in the session.
	Installed []string
	// Log is a parked session's log, oldest first, which it takes back
	// when it returns (a snapshot's copies start logs of their own).
	Log []LogEntry
}

// Snapshot writes se out while it keeps running; no request runs in it
// meanwhile. A paused session is refused: resume it first.
func (t *Table) Snapshot(ctx context.Context, se *Session, to SnapshotTo) (Capture, error) {
	if err := lockCtx(ctx, se); err != nil {
		return Capture{}, err
	}
	defer se.mu.Unlock()
	if se.paused != running {
		return Capture{}, fmt.Errorf("%w: session %s is paused; resume it first", ErrPaused, se.id)
	}
	return t.capture(ctx, se, to)
}

// capture writes out se, alive and running; call with se.mu.
func (t *Table) capture(ctx context.Context, se *Session, to SnapshotTo) (Capture, error) {
	if err := se.alive(); err != nil {
		return Capture{}, err
	}
	lease := se.sandbox()
	// The save runs inside the sandbox (gVisor's kernel writes its image,
	// the harness pickles): at the idle allowance it would crawl.
	t.addIdleCPU(se.cpu.begin(lease, t.cfg.CPULimit, t.log))
	defer se.cpu.end(lease, t.cfg.IdleCPU, t.log)
	c := Capture{Backend: se.backend, Installed: slices.Clone(se.installed)}
	if se.backend == fleet.GVisor {
		img, err := lease.Checkpoint(ctx, to.ImageDir, true)
		if err != nil {
			return Capture{}, err
		}
		c.Image = &img
	} else {
		rep, err := lease.SnapshotState(to.State, to.StateOpts)
		if err != nil {
			return Capture{}, err
		}
		for _, g := range rep.Lost {
			c.NotSaved = append(c.NotSaved, lostName(g))
		}
		if extra := rep.LostCount - len(rep.Lost); extra > 0 {
			c.NotSaved = append(c.NotSaved, fmt.Sprintf("... and %d more", extra))
		}
	}
	// The workspace as the saved state knew it: the code stands still
	// while it is copied (a frozen cgroup costs a millisecond natively).
	if err := se.freeze(); err != nil {
		return Capture{}, fmt.Errorf("%w: pause for the workspace copy: %v", ErrUnavailable, err)
	}
	defer se.thaw() // the commands', after the interpreter's
	if err := lease.Pause(); err != nil {
		return Capture{}, fmt.Errorf("%w: pause for the workspace copy: %v", ErrUnavailable, err)
	}
	err := to.files(se)
	if rerr := lease.Resume(); rerr != nil && err == nil {
		err = fmt.Errorf("%w: resume after the workspace copy: %v", ErrEnded, rerr)
	}
	if err != nil {
		return Capture{}, err
	}
	return c, nil
}

// files writes out se's workspace, then its packages.
func (to SnapshotTo) files(se *Session) error {
	if err := to.Workspace(se.dir); err != nil {
		return err
	}
	if to.Site != nil && se.site != "" {
		if err := to.Site(se.site); err != nil {
			return err
		}
	}
	if to.Root != nil && se.root != "" {
		return to.Root(se.root)
	}
	return nil
}

// lostName is one global that was not saved, for a snapshot's NotSaved.
func lostName(g fleet.StateGlobal) string {
	name := g.Name
	if g.Context != "" {
		name = g.Context + ":" + name
	}
	if g.Reason != "" {
		name += " (" + g.Reason + ")"
	}
	return name
}

// RestoreFrom is a snapshot a new session starts from.
type RestoreFrom struct {
	// Workspace fills the new session's workspace dir, its files owned
	// by uid; Site, when set, its package directory.
	Workspace func(dir string, uid int) error
	Site      func(dir string, uid int) error
	// Root, when set, fills a machine session's own root.
	Root func(dir string, uid int) error
	// State is a native session's interpreter state.
	State     io.Reader
	StateOpts fleet.StateOptions
	// ImageDir holds a gVisor session's memory image; Image describes it.
	ImageDir string
	Image    *fleet.MemoryImage
	// Back is the parked session this brings back, under its id; nil for
	// a new session.
	Back *Parked
	// Installed are the modules pip_install had put in the session: its
	// copy may import them.
	Installed []string
}

// CreateFrom opens a session of req from a snapshot: its workspace
// filled first, then its sandbox started from the memory image (gVisor)
// or started fresh and given the saved state (native). What could not be
// restored is named in the returned list.
func (t *Table) CreateFrom(ctx context.Context, req Request, shape Shape, from RestoreFrom) (Info, []string, error) {
	cold := from.Back != nil && from.Back.Cold
	if from.Back != nil {
		t.waitGone(from.Back.ID)
	}
	if !cold && (shape.Backend == fleet.GVisor) != (from.Image != nil) {
		return Info{}, nil, fmt.Errorf("%w: the snapshot was made on another backend", ErrUnavailable)
	}
	if info, lost, ok, err := t.restoreIntoSpare(req, shape, from); ok {
		return info, lost, err
	}
	t.mu.Lock()
	if err := t.roomLocked(req.Owner); err != nil {
		t.mu.Unlock()
		return Info{}, nil, err
	}
	if err := t.backFreeLocked(from.Back); err != nil {
		t.mu.Unlock()
		return Info{}, nil, err
	}
	se := t.newSession(req, shape)
	from.Back.identify(se)
	se.mu.Lock() // until it is restored, as a new session's start
	t.byID[se.id] = se
	t.mu.Unlock()
	se.restore = &from
	err := t.start(ctx, se, t.launch)
	se.restore = nil
	var lost []string
	if err == nil {
		lost, err = restoreInterpreter(se, from)
	}
	info, err := t.started(se, err)
	return info, lost, err
}

// waitGone waits until the last incarnation of session id, parked out of
// the table, has removed its directories, whose names a session brought
// back under its id takes (Park); call with no lock held.
func (t *Table) waitGone(id string) {
	t.mu.Lock()
	gone := t.ending[id]
	t.mu.Unlock()
	if gone != nil {
		<-gone
	}
}

// backFreeLocked refuses to bring back a parked session whose id is in
// the table already (nil back: a new session); call with t.mu.
func (t *Table) backFreeLocked(back *Parked) error {
	if back == nil {
		return nil
	}
	if _, dup := t.byID[back.ID]; dup {
		return fmt.Errorf("%w: session %s is here already", ErrUnavailable, back.ID)
	}
	return nil
}

// identify gives se, brought back from its park, its own id, creation
// time, run count and log (nothing for a new session: nil back).
func (back *Parked) identify(se *Session) {
	if back != nil {
		se.id, se.created, se.runs = back.ID, back.Created, back.Runs
		se.log.restore(back.Log)
	}
}

// restoreInterpreter gives a started native sandbox the saved state, and
// the session the modules its packages allow; call with se.mu.
func restoreInterpreter(se *Session, from RestoreFrom) ([]string, error) {
	se.Allow(from.Installed)
	if from.Image != nil || from.State == nil {
		return nil, nil // gVisor's memory image has it all; a cold park has none
	}
	return restoreState(se.sandbox(), from)
}

// restoreState gives a fresh native sandbox the saved interpreter state.
func restoreState(lease *fleet.Lease, from RestoreFrom) ([]string, error) {
	rep, err := lease.RestoreState(from.State, from.StateOpts)
	if err != nil {
		return nil, err
	}
	var lost []string
	for _, g := range rep.Lost {
		lost = append(lost, lostName(g))
	}
	return lost, nil
}
