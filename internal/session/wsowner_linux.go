package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A session's workspaces (<state>/sessions/<id> and <id>.site) belong to
// the process holding an exclusive flock on <state>/sessions/<id>.lock.
// The kernel drops the lock when that process dies, however it dies, so a
// later process sharing the state directory (a restart, a second replica,
// a `codecage run`) tells a dead owner's workspaces from a live one's.

const ownerSuffix = ".lock"

// claimWorkspaces takes ownership of session id's workspaces before they
// exist. The lock file appears already locked (made under a temporary
// name, then renamed), so no other process can see it unlocked and take
// the workspaces for stale.
func claimWorkspaces(stateDir, id string) (*os.File, error) {
	dir := filepath.Join(stateDir, "sessions")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, id+ownerSuffix)
	tmp := filepath.Join(dir, "."+id+ownerSuffix+".tmp")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("lock %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	// The claim is named by its final path, which releaseWorkspaces
	// removes: f still bears the temporary one. A duplicate descriptor
	// shares the open file, and with it the lock.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		os.Remove(final)
		return nil, fmt.Errorf("claim %s: %w", final, err)
	}
	return os.NewFile(uintptr(fd), final), nil
}

// releaseWorkspaces gives up ownership once the workspaces are removed.
func releaseWorkspaces(f *os.File) {
	if f == nil {
		return
	}
	_ = os.Remove(f.Name())
	_ = f.Close()
}

// staleWorkspaces is what reapStaleWorkspaces found and did.
type staleWorkspaces struct {
	Removed  int      // workspaces of dead owners removed
	Unmounts int      // of them, mounted ones unmounted
	Kept     []string // dead owners' workspaces that could not be removed, with why
	Unowned  int      // workspaces with no owner record (an older codecage's), left alone
}

// reapStaleWorkspaces unmounts and removes the workspaces of every dead
// owner under stateDir, and only those: a lock it cannot take is a live
// process's. Directories without a lock file predate owner records; their
// owner may be an older codecage still running, so they are only counted.
func reapStaleWorkspaces(stateDir string) (staleWorkspaces, error) {
	var r staleWorkspaces
	dir := filepath.Join(stateDir, "sessions")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	owners := map[string]bool{}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ownerSuffix); ok && e.Type().IsRegular() {
			owners[name] = true
		}
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir():
			if !owners[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".site"), tmpSuffix), rootSuffix)] {
				r.Unowned++
			}
		case strings.HasPrefix(name, ".") && strings.HasSuffix(name, ownerSuffix+".tmp"):
			// A claim its process died making (no workspace exists yet);
			// a recent one may be a live claim about to lock it.
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
				reapOwner(filepath.Join(dir, name), nil, &r)
			}
		}
	}
	for id := range owners {
		reapOwner(filepath.Join(dir, id+ownerSuffix), []string{filepath.Join(dir, id), filepath.Join(dir, id+".site"), filepath.Join(dir, id+tmpSuffix), filepath.Join(dir, id+rootSuffix)}, &r)
	}
	return r, nil
}

// reapOwner removes workspaces and their lock file when the lock is free.
func reapOwner(lock string, workspaces []string, r *staleWorkspaces) {
	f, err := os.OpenFile(lock, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return // gone meanwhile (its owner closed the session), or not ours to judge
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // a live owner
	}
	for _, ws := range workspaces {
		unmounted, err := removeStaleWorkspace(ws)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			r.Kept = append(r.Kept, ws+": "+err.Error())
			return // the lock stays: a later start tries again
		}
		r.Removed++
		if unmounted {
			r.Unmounts++
		}
	}
	_ = os.Remove(lock)
}

// removeStaleWorkspace detaches every mount stacked on dir (lazily: a
// mount still busy goes once its last user does; its submounts go with
// it), then removes dir, unless something is still mounted on it.
func removeStaleWorkspace(dir string) (unmounted bool, err error) {
	if _, err := os.Lstat(dir); err != nil {
		return false, err
	}
	for range 16 {
		if unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) != nil {
			break // EINVAL: no longer a mount point
		}
		unmounted = true
	}
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return unmounted, err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return unmounted, err
	}
	if st.Dev != parent.Dev {
		return unmounted, errors.New("still a mount point after unmounting")
	}
	return unmounted, os.RemoveAll(dir)
}
