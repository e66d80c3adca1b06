package envs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/session"
)

// An image or E2B template may put files in the home its sandboxes start
// in (/home/user, or its WORKDIR when that is the home). A VM has them on
// its disk, writable; a session's home is its workspace, so a new session
// starts with a copy of them there. The copy reads the root beneath it
// (os.Root: no link leads out), takes regular files, directories and
// symlinks (recreated as they are, never followed) only, and stays within
// the workspace's size; what does not fit is left out and named.

// Bounds of one copy, besides the workspace's size.
const (
	seedMaxEntries = 10000
	seedMaxDepth   = 32
	seedMaxSkipped = 8 // reasons kept for the event
)

// seeding is one copy of a root's home into a workspace.
type seeding struct {
	src, dst *os.Root
	uid      int
	budget   int64 // bytes still free
	entries  int
	copied   int64
	skipped  []string
	nSkipped int
}

// Seeded says what Seed copied: its bytes, and why entries were left out.
type Seeded struct {
	Home    string
	Bytes   int64
	Skipped []string
}

// Seed copies what env's root holds at se's home into se's workspace,
// once, before the session is handed out. A root with nothing there is no
// error; what is left out is reported (the root's event).
func (d *Envs) Seed(ctx context.Context, se *session.Session, env envstore.Env) (Seeded, error) {
	home := se.Home()
	if env.RootDir == "" || home == "" {
		return Seeded{}, nil
	}
	dir, _, _, _ := se.Workspace()
	n, skipped, err := seedFrom(ctx, env.RootDir, home, dir, se.SandboxUID(), d.cfg.WorkspaceMax)
	if err != nil {
		return Seeded{}, fmt.Errorf("environment %s: copying its %s into the workspace: %w", bounded.Quote(env.Name), home, err)
	}
	return Seeded{Home: home, Bytes: n, Skipped: skipped}, nil
}

// seedFrom copies root's home (a path inside the root) into the host
// directory dst, giving what it makes to uid, within budget bytes. It
// returns the bytes copied and why entries were left out.
func seedFrom(ctx context.Context, root, home, dst string, uid int, budget int64) (int64, []string, error) {
	rr, err := os.OpenRoot(root)
	if err != nil {
		return 0, nil, err
	}
	defer rr.Close()
	rel := strings.TrimPrefix(path.Clean("/"+home), "/")
	fi, err := rr.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !fi.IsDir() {
		return 0, nil, nil // nothing there (or no directory): nothing to copy
	}
	if err != nil {
		return 0, nil, err
	}
	src, err := rr.OpenRoot(rel)
	if err != nil {
		return 0, nil, err
	}
	defer src.Close()
	dr, err := os.OpenRoot(dst)
	if err != nil {
		return 0, nil, err
	}
	defer dr.Close()
	sd := &seeding{src: src, dst: dr, uid: uid, budget: budget}
	err = sd.dir(ctx, ".", 0)
	if sd.nSkipped > len(sd.skipped) {
		sd.skipped = append(sd.skipped, fmt.Sprintf("%d more", sd.nSkipped-len(sd.skipped)))
	}
	return sd.copied, sd.skipped, err
}

func (sd *seeding) skip(p, why string) {
	sd.nSkipped++
	if len(sd.skipped) < seedMaxSkipped {
		sd.skipped = append(sd.skipped, bounded.Quote(p)+": "+why)
	}
}

// dir copies the entries of directory rel (which exists in dst).
func (sd *seeding) dir(ctx context.Context, rel string, depth int) error {
	f, err := sd.src.Open(rel)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(seedMaxEntries + 1)
	f.Close()
	if err != nil && err != io.EOF {
		return err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := path.Join(rel, name)
		if sd.entries >= seedMaxEntries {
			sd.skip(p, fmt.Sprintf("more than %d entries", seedMaxEntries))
			continue
		}
		sd.entries++
		fi, err := sd.src.Lstat(p)
		if err != nil {
			sd.skip(p, err.Error())
			continue
		}
		switch mode := fi.Mode(); {
		case mode.IsDir():
			if depth+1 > seedMaxDepth {
				sd.skip(p, fmt.Sprintf("deeper than %d directories", seedMaxDepth))
				continue
			}
			if err := sd.dst.Mkdir(p, mode.Perm()|0o700); err != nil {
				sd.skip(p, err.Error())
				continue
			}
			sd.own(p)
			if err := sd.dir(ctx, p, depth+1); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			target, err := sd.src.Readlink(p)
			if err == nil {
				err = sd.dst.Symlink(target, p)
			}
			if err != nil {
				sd.skip(p, err.Error())
				continue
			}
			sd.own(p)
		case mode.IsRegular():
			sd.file(p, fi.Size(), mode.Perm())
		default:
			sd.skip(p, "not a regular file, directory or symlink")
		}
	}
	return nil
}

// file copies regular file p of size bytes, if it fits.
func (sd *seeding) file(p string, size int64, perm fs.FileMode) {
	if size > sd.budget {
		sd.skip(p, fmt.Sprintf("%d bytes do not fit in the workspace's %d left (SANDBOX_WORKSPACE_SIZE)", size, sd.budget))
		return
	}
	in, err := sd.src.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		sd.skip(p, err.Error())
		return
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		sd.skip(p, "not a regular file")
		return
	}
	out, err := sd.dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm&0o777)
	if err != nil {
		sd.skip(p, err.Error())
		return
	}
	// At most size bytes: a file that grew meanwhile is cut, never more.
	n, err := io.Copy(out, io.LimitReader(in, size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = sd.dst.Remove(p)
		sd.skip(p, err.Error())
		return
	}
	sd.budget -= n
	sd.copied += n
	sd.own(p)
}

// own gives p to the sandbox's uid, so that its code may change it as a
// VM's user could (rootless, it is already ours).
func (sd *seeding) own(p string) {
	if sd.uid > 0 && sd.uid != os.Geteuid() {
		_ = sd.dst.Lchown(p, sd.uid, sd.uid)
	}
}
