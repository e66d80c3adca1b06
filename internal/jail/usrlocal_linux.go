package jail

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A machine with root inside and a root of its own has a writable
// /usr/local, as a computer's is for its root (sudo pip install, a tool
// dropped in /usr/local/bin): an overlay whose lower layer is the
// /usr/local the system directories brought (the host's or the
// environment's, read-only) and whose upper layer lives in the machine's
// own root, under its usr, which the system /usr covers (so the code
// reaches it only through the overlay) and which a park, snapshot or
// fork keeps with the rest of the root.
//
// The init mounts it in the sandbox's user namespace, where a copy-up
// could not give a new upper file the lower one's owner (the host's root
// is not mapped). So the directories of the lower layer, to a depth of
// upperDepth, are made in the upper one ahead, as root inside's: new
// files go there without a copy-up. Changing a file of the lower layer
// itself still fails, as the host's files must not change.

// The upper and work directories, relative to the machine's root.
const (
	usrLocalUpper = "usr/local"
	usrLocalWork  = "usr/.local-work"
)

// upperDepth and maxUpperDirs bound the directories made ahead in the
// upper layer (/usr/local/lib/python3.11/dist-packages is at depth 3).
const (
	upperDepth   = 3
	maxUpperDirs = 2000
)

// usrLocal holds the overlay's upper and work directories between the
// two steps of buildRoot that need them.
type usrLocal struct {
	upper, work int
}

// hasUsrLocal reports whether the machine gets a writable /usr/local.
func (cfg *initConfig) hasUsrLocal() bool {
	return cfg.RootInside && cfg.hasMachineRoot() && !cfg.UsrTree // a writable /usr holds it
}

// openUsrLocal makes (as root inside's) and opens the upper and work
// directories in the machine's root, before the system directories cover
// its usr. The supervisor kept them from the last start (keepUsrLocal).
func openUsrLocal() (*usrLocal, error) {
	u := &usrLocal{upper: -1, work: -1}
	var err error
	if u.upper, err = rootsDir(usrLocalUpper); err != nil {
		return nil, fmt.Errorf("/usr/local: %w", err)
	}
	if u.work, err = rootsDir(usrLocalWork); err != nil {
		u.close()
		return nil, fmt.Errorf("/usr/local: %w", err)
	}
	return u, nil
}

// rootsDir makes rel (relative to the machine's root) a directory of root
// inside's and opens it (O_PATH), never through a link at its end: an
// overlay's upper or work directory.
func rootsDir(rel string) (int, error) {
	p := newRoot + "/" + rel
	if err := os.MkdirAll(p, 0o755); err != nil {
		return -1, err
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Fchownat(fd, "", 0, 0, unix.AT_EMPTY_PATH); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (u *usrLocal) close() { closeLayers(&u.upper, &u.work) }

// closeLayers closes an overlay's layer descriptors that are open and
// marks them closed (-1), so that a second close does nothing.
func closeLayers(fds ...*int) {
	for _, fd := range fds {
		if *fd >= 0 {
			_ = unix.Close(*fd)
			*fd = -1
		}
	}
}

// mount mirrors the lower layer's directories in the upper one and
// mounts the overlay over the placed /usr/local (nosuid, nodev). A root
// without /usr/local gets none.
func (u *usrLocal) mount() error {
	defer u.close()
	lower := newRoot + "/usr/local"
	if fi, err := os.Lstat(lower); err != nil || !fi.IsDir() {
		return nil
	}
	budget := maxUpperDirs
	if err := mirrorDirs(lower, u.upper, upperDepth, &budget); err != nil {
		return fmt.Errorf("/usr/local: %w", err)
	}
	if err := mountOverlay(lower, u.upper, u.work); err != nil {
		return fmt.Errorf("/usr/local: %w", err)
	}
	return nil
}

// mountOverlay mounts an overlay (nosuid, nodev) over dir, dir itself its
// lower layer (resolved before the overlay covers it), upper and work
// directories given by descriptor; mounted in the sandbox's user
// namespace, its own attributes are user.* ones (userxattr).
func mountOverlay(dir string, upper, work int) error {
	fd := func(n int) string { return "/proc/self/fd/" + strconv.Itoa(n) }
	opts := "lowerdir=" + dir + ",upperdir=" + fd(upper) + ",workdir=" + fd(work) + ",userxattr"
	if err := unix.Mount("overlay", dir, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the overlay: %w", err)
	}
	return nil
}

// mirrorDirs makes under the directory dst (a descriptor) each directory
// of src, to depth levels, owned by root inside with src's mode; it
// never follows a link in dst (the code's: the upper layer is its to
// write) and stops after budget directories.
func mirrorDirs(src string, dst, depth int, budget *int) error {
	if depth == 0 {
		return nil
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil // unreadable below: nothing to mirror
	}
	for _, e := range entries {
		if !e.IsDir() || *budget <= 0 {
			continue
		}
		*budget--
		info, err := e.Info()
		if err != nil {
			continue
		}
		made := true
		if err := unix.Mkdirat(dst, e.Name(), uint32(info.Mode().Perm())); errors.Is(err, unix.EEXIST) {
			made = false
		} else if err != nil {
			return err
		}
		child, err := unix.Openat(dst, e.Name(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // the code put a link or a file there: its own
		}
		if made {
			err = unix.Fchownat(child, "", 0, 0, unix.AT_EMPTY_PATH)
		}
		if err == nil {
			err = mirrorDirs(src+"/"+e.Name(), child, depth-1, budget)
		}
		_ = unix.Close(child)
		if err != nil {
			return err
		}
	}
	return nil
}
