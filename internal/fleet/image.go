package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
)

// Memory images: a gVisor sandbox saved whole (its kernel's state and
// memory) into a directory, from which new sandboxes start where it was.
// The workspace is not in the image: the files the sandbox holds open must
// exist at restore, in the workspace given then (a fork's own copy).

// MemoryImage describes a memory image: its manifest (runsc build, platform,
// uid, size, what the sandbox was started with).
type MemoryImage = gvisor.Manifest

// Errors of memory images.
var (
	// ErrNoImages means the sandbox's backend cannot save its memory: the
	// native backend (its state is saved by other means).
	ErrNoImages = errors.New("fleet: memory images are not supported on the native backend")
	// ErrImageMismatch means an image of another runsc build or platform,
	// or whose mounts the work's do not match: refused before it starts.
	ErrImageMismatch = gvisor.ErrImageMismatch
	// ErrBadImage means a missing, partial or corrupt image.
	ErrBadImage = gvisor.ErrBadImage
)

// checkpointer is a sandbox whose memory can be saved (gVisor's).
type checkpointer interface {
	Checkpoint(ctx context.Context, dir string, leaveRunning bool) (gvisor.Manifest, error)
}

// imageStarter starts sandboxes from memory images (gVisor's starter).
type imageStarter interface {
	Restore(ctx context.Context, dir string, spec jail.Spec) (Box, error)
}

// Checkpoint saves the sandbox's memory into dir (made when missing, and
// empty), not while a run is in progress. With leaveRunning (a snapshot,
// a fork) the sandbox goes on, frozen for the copy. Without (a pause) the
// sandbox ends and the lease is released: its slot goes back to the
// budget, which bounds the sandboxes that exist; a paused session has
// none, only an image on disk (bounded by its owner's limits on images),
// and its resume waits for a slot like any start.
//
// Only a sandbox running as an owner's uid (ReserveUID: a session's) can
// be saved: the image holds that uid (HoldUID) from now on, since every
// sandbox restored from it runs as it. Whoever keeps the image calls
// ReleaseUID(img.UID) once it is deleted, and HoldUID(img.UID) for each
// image it still keeps after a restart.
func (l *Lease) Checkpoint(ctx context.Context, dir string, leaveRunning bool) (MemoryImage, error) {
	if l.backend == Native {
		return MemoryImage{}, ErrNoImages
	}
	if l.class != nil || l.released.Load() {
		return MemoryImage{}, errors.New("fleet: only a held session's sandbox can be checkpointed")
	}
	b := l.current()
	c, ok := b.(checkpointer)
	if !ok {
		return MemoryImage{}, fmt.Errorf("fleet: the %s backend cannot checkpoint this sandbox", l.backend)
	}
	uid := b.HostUID()
	if !uidHeld(uid) {
		return MemoryImage{}, fmt.Errorf("fleet: the sandbox's uid %d is not an owner's (ReserveUID): its image could not keep it", uid)
	}
	if err := HoldUID(uid); err != nil {
		return MemoryImage{}, err
	}
	img, err := c.Checkpoint(ctx, dir, leaveRunning)
	if err != nil {
		ReleaseUID(uid)
		return MemoryImage{}, err
	}
	if !leaveRunning {
		l.used.Store(true) // it has ended: nothing to kill
		l.Release()
	}
	return img, nil
}

// StartFromImage starts a gVisor sandbox from the memory image in dir,
// once the budget has a slot for it (as Start). w is the work as for the
// session that made the image (Kind Session), with a new ID and its own
// workspace (and package directory) at the same paths inside: a fork's
// copy, or the paused session's own. The program, its environment and its
// uid are the image's; w.HostUID, if set, must be that uid. The lease
// holds the uid (HoldUID) until its sandbox is gone, so forks of one image
// share the parent's uid with each other and with the parent, as copies
// of one owner's session, and no unrelated sandbox gets it meanwhile. An
// image of another runsc build or platform is refused with
// ErrImageMismatch, a missing or corrupt one with ErrBadImage.
func (f *Fleet) StartFromImage(ctx context.Context, dir string, w Work) (*Lease, error) {
	st, ok := f.cfg.Starters[GVisor].(imageStarter)
	if !ok {
		return nil, errors.New("fleet: no gvisor backend here to restore an image")
	}
	img, err := gvisor.ReadImage(dir)
	if err != nil {
		return nil, err
	}
	if w.HostUID != 0 && w.HostUID != img.UID {
		return nil, fmt.Errorf("%w: its uid is %d, the work's %d", ErrImageMismatch, img.UID, w.HostUID)
	}
	if err := HoldUID(img.UID); err != nil {
		return nil, err
	}
	slot, err := f.budget.Acquire(ctx, f.cfg.QueueTimeout)
	if err != nil {
		ReleaseUID(img.UID)
		return nil, err
	}
	spec := w.Spec()
	spec.HostUID = img.UID
	if spec.ID == "" {
		spec.ID = jail.NewID()
	}
	l := &Lease{fleet: f, backend: GVisor, slot: slot, stdout: &switchWriter{w: spec.Stdout}, stderr: &switchWriter{w: spec.Stderr}}
	spec.Stdout, spec.Stderr = l.stdout, l.stderr
	b, err := st.Restore(ctx, dir, spec)
	if err != nil {
		slot.Release()
		ReleaseUID(img.UID)
		return nil, err
	}
	l.box = b
	l.onEnd = func() { ReleaseUID(img.UID) }
	return l, nil
}

// ReadImage reads the manifest of the memory image in dir.
func ReadImage(dir string) (MemoryImage, error) { return gvisor.ReadImage(dir) }
