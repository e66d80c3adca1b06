package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/snapstore"
	"github.com/codecage/codecage/internal/wsfs"
)

// gVisor memory images, kept where they are: a snapshot's image is a file
// set of the store (runsc checkpoints into the store's directory, sealed
// per file at commit), and a session starts from it in place once the
// store verified every file, with no tar and no copy (the directory
// store; PostgreSQL copies it out). A fork keeps its image out of the
// store: one checkpoint into a directory of its own, from which every
// copy starts, several at once.

// imageFiles is a verified snapshot's memory image, as a directory.
func (p *Persist) imageFiles(snap *snapstore.Snapshot) (*snapstore.FileSet, error) {
	fs, err := snap.Files(blobMemory, filepath.Join(p.cfg.StateDir, "images"))
	if err != nil {
		return nil, fmt.Errorf("%w: its memory image: %v", errdefs.ErrSnapshotUnusable, errdefs.Snapshot(err))
	}
	return fs, nil
}

// imageLoaded ends the session just started from image if a file of it
// changed while runsc loaded it (nil image: a native snapshot).
func (p *Persist) imageLoaded(image *snapstore.FileSet, id, owner string) error {
	if image == nil {
		return nil
	}
	if err := image.Check(); err != nil {
		if se, serr := p.sessions.Get(id, owner); serr == nil {
			p.sessions.Drop(se)
		}
		return fmt.Errorf("%w: its memory image: %v", errdefs.ErrSnapshotUnusable, err)
	}
	return nil
}

// forkStarts is how many copies of a fork start at once: runsc restores
// wait on the disk and on each other's processes as much as on the CPU.
const forkStarts = 4

// forkImage forks a gVisor session: one checkpoint (the session goes on)
// and one copy of its workspace into a directory of the fork's own, then
// count sessions started from them, forkStarts at a time.
func (p *Persist) forkImage(ctx context.Context, se *session.Session, owner string, count int, lifetime time.Duration) ([]Copy, error) {
	dir, err := p.tempDir()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tarPath, sitePath, rootPath := filepath.Join(dir, "workspace.tar"), filepath.Join(dir, "site.tar"), filepath.Join(dir, "root.tar")
	archive := func(path string, limits wsfs.ArchiveLimits) func(string) error {
		return func(ws string) error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
			}
			defer f.Close()
			_, err = wsfs.Archive(ctx, ws, f, limits)
			return err
		}
	}
	unpack := func(path string, limits wsfs.ArchiveLimits) func(string, int) error {
		return func(ws string, uid int) error {
			f, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
			}
			defer f.Close()
			return wsfs.Unpack(ctx, ws, f, uid, unpackLimits(limits, uid))
		}
	}
	to := session.SnapshotTo{ImageDir: filepath.Join(dir, "image"), Workspace: archive(tarPath, p.workspaceLimits()),
		Site: archive(sitePath, p.siteLimits()), Root: archive(rootPath, p.rootLimits())}
	c, err := p.sessions.Snapshot(ctx, se, to)
	if err != nil {
		return nil, errdefs.Snapshot(err)
	}
	// The checkpoint holds the image's uid; each copy holds it again for
	// its life.
	defer fleet.ReleaseUID(c.Image.UID)
	orig := se.Request()
	spec, _ := json.Marshal(specOf(orig, se.Environment()))
	req, shape, release, err := p.snapshotShape(session.Request{Owner: owner, Lifetime: lifetime, OnTimeout: orig.OnTimeout,
		ManualResume: orig.ManualResume, Labels: orig.Labels, Template: orig.Template},
		snapstore.Manifest{Backend: se.Backend(), Spec: spec}, se.Environment())
	if err != nil {
		return nil, err
	}
	defer release() // after the copies are in the table
	from := session.RestoreFrom{ImageDir: to.ImageDir, Image: c.Image, Workspace: unpack(tarPath, p.workspaceLimits()),
		Installed: c.Installed}
	if _, err := os.Stat(sitePath); err == nil {
		from.Site = unpack(sitePath, p.siteLimits())
	}
	if _, err := os.Stat(rootPath); err == nil { // a machine on its own root
		from.Root = unpack(rootPath, p.rootLimits())
	}
	out := make([]Copy, count)
	sem := make(chan struct{}, forkStarts)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			info, _, err := p.sessions.CreateFrom(ctx, req, shape, from)
			if err == nil {
				err = p.o.StartEnvironment(ctx, info.ID, req.Owner, shape.Env)
			}
			if err != nil {
				out[i].Err = errdefs.Snapshot(err)
				return
			}
			out[i].Info = &info
		}()
	}
	wg.Wait()
	return out, nil
}
