package jail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A machine with root inside, a root of its own and the host's system
// directories has a writable /usr, as a computer's is for its root
// (dpkg, sudo pip install, a tool copied into /usr/bin, a file of the
// system edited): an overlay whose upper layer lives in the machine's own
// root, under its usr (which the overlay covers, so the code reaches it
// only through the overlay, and a park, snapshot or fork keeps it with
// the rest of the root).
//
// Its lower layer is the host's /usr seen through an idmapped mount: the
// ids of the sandbox's block appear as themselves inside (the host's
// root as root inside), so a copy-up keeps each file's owner and root
// inside may change any file of its /usr, in its upper layer. The lower
// mount is read-only: the host's /usr never changes. Only the supervisor
// can make such a mount (CAP_SYS_ADMIN on the host), after the init has
// its user namespace; it sends it with the init's configuration. Where
// it cannot (no idmapped mounts, a /usr with mounts of its own), the
// machine keeps the read-only /usr and its writable /usr/local
// (usrlocal_linux.go).

// Through the idmapped /usr, root inside has the rights of an owner of
// the host's files there, and so may read what only the host's root (or
// a host user whose id falls in the block) may read. So every entry of
// the host's /usr that others may not read (a directory: read and
// search) is hidden in the machine: a whiteout in the upper layer, made
// at each start (usrHidden lists them, scanned once per process).

// The upper and work directories, relative to the machine's root.
const (
	usrUpper = "usr/.upper"
	usrWork  = "usr/.work"
)

// sendsUsrTree makes the idmapped /usr the init of a machine that wants
// the overlay is sent with cfg, and marks cfg so (nil: none; without it
// the machine keeps a read-only /usr and a writable /usr/local, which is
// no reason to fail its start).
func (s *Sandbox) sendsUsrTree(cfg *initConfig) *os.File {
	if !s.wantsUsrOverlay() {
		return nil
	}
	hidden, err := usrHidden()
	if err != nil {
		return nil
	}
	tree, err := idmappedUsr(s.cmd.Process.Pid)
	if err != nil {
		return nil
	}
	cfg.UsrTree, cfg.UsrHidden = true, hidden
	return tree
}

// wantsUsrOverlay reports whether the sandbox's machine gets the /usr
// overlay: root inside, a root of its own, the host's system directories.
func (s *Sandbox) wantsUsrOverlay() bool {
	return s.rootInside() && s.spec.MachineRoot != "" && s.spec.Root == "" && s.spec.Programs == nil
}

// Bounds of the scan for hidden entries: beyond them, no writable /usr.
const (
	maxUsrEntries = 2_000_000
	maxUsrHidden  = 4096
)

// usrHidden lists the entries of the host's /usr that others may not
// read, relative to /usr, as they were when first asked.
var usrHidden = sync.OnceValues(func() ([]string, error) { return scanHidden("/usr", maxUsrEntries, maxUsrHidden) })

// scanHidden walks dir (never following a link, nor into another
// filesystem) and lists what others may not read: files not readable,
// directories not readable and searchable (not walked further).
func scanHidden(dir string, maxEntries, maxHidden int) ([]string, error) {
	var root unix.Stat_t
	if err := unix.Lstat(dir, &root); err != nil {
		return nil, err
	}
	var hidden []string
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if seen++; seen > maxEntries {
			return fmt.Errorf("more than %d entries", maxEntries)
		}
		if p == dir || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Dev != root.Dev {
			return fmt.Errorf("%s is on another filesystem", p)
		}
		want := uint32(0o004)
		if d.IsDir() {
			want = 0o005
		}
		if st.Mode&want == want {
			return nil
		}
		if hidden = append(hidden, strings.TrimPrefix(p, dir+"/")); len(hidden) > maxHidden {
			return fmt.Errorf("more than %d entries others may not read", maxHidden)
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", dir, err)
	}
	return hidden, nil
}

// idmappedUsr is a detached, read-only clone of the host's /usr whose
// ids are mapped as the user namespace of process pid maps them.
func idmappedUsr(pid int) (*os.File, error) {
	if usrHasSubmounts() {
		return nil, errors.New("/usr has mounts of its own")
	}
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ns)
	return idmappedTree("/usr", ns)
}

// idmappedTree is a detached, read-only clone of the directory dir (not
// recursive: the caller knows nothing is mounted below it) whose ids are
// mapped as the user namespace userns (a descriptor) maps them.
func idmappedTree(dir string, userns int) (*os.File, error) {
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, err
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | roFlags, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		_ = unix.Close(tree)
		return nil, err
	}
	return os.NewFile(uintptr(tree), filepath.Base(dir)), nil
}

// usrHasSubmounts reports whether a mount lies below the host's /usr,
// as it was when first asked (a host's mounts under /usr are set up at
// boot, and each start would otherwise read every mount of the host).
var usrHasSubmounts = sync.OnceValue(func() bool { return hasSubmounts("/usr") })

// hasSubmounts reports whether a mount lies below dir in this process's
// mount namespace.
func hasSubmounts(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		// The fifth field is the mount point (octal escapes keep its
		// spaces out, and "/" is never escaped).
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			return true
		}
	}
	return false
}

// openWritableUsr opens, before the system directories cover the
// machine root's usr, the layers of its writable /usr (and places the
// package managers' state), or else of its writable /usr/local; neither
// for a sandbox that gets none.
func openWritableUsr(cfg *initConfig) (*usrOverlay, *usrLocal, error) {
	defer closeLayers(&cfg.pkgStatus) // read by placePackageState, if at all
	if cfg.hasUsrLocal() {
		u, err := openUsrLocal()
		return nil, u, err
	}
	if !cfg.UsrTree {
		return nil, nil, nil
	}
	o, err := openUsrOverlay(cfg.usrTree, cfg.UsrHidden)
	cfg.usrTree = -1 // closed by now, or o's to close
	if err != nil {
		return nil, nil, err
	}
	if err := placePackageState(cfg.pkgStatus); err != nil { // pkgskeleton_linux.go
		o.close()
		return nil, nil, err
	}
	if cfg.etc, err = openMachineEtc(); err != nil { // etcoverlay_linux.go
		o.close()
		return nil, nil, err
	}
	return o, nil, nil
}

// usrOverlay holds the overlay's layers between the two steps of
// buildRoot that need them.
type usrOverlay struct {
	lower, upper, work int
}

// openUsrOverlay makes (as root inside's) and opens the upper and work
// directories in the machine's root, before the system directories cover
// its usr, and hides there the host's entries others may not read. A
// root whose /usr/local was an overlay of its own (an older codecage's)
// keeps its files: they move into the upper layer.
func openUsrOverlay(lower int, hidden []string) (*usrOverlay, error) {
	o := &usrOverlay{lower: lower, upper: -1, work: -1}
	if _, err := os.Lstat(newRoot + "/" + usrUpper); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(newRoot+"/"+usrUpper, 0o755); err != nil {
			o.close()
			return nil, fmt.Errorf("/usr: %w", err)
		}
		if fi, err := os.Lstat(newRoot + "/" + usrLocalUpper); err == nil && fi.IsDir() {
			if err := os.Rename(newRoot+"/"+usrLocalUpper, newRoot+"/"+usrUpper+"/local"); err != nil {
				o.close()
				return nil, fmt.Errorf("/usr: keep /usr/local's files: %w", err)
			}
		}
	}
	_ = os.RemoveAll(newRoot + "/" + usrLocalWork)
	var err error
	if o.upper, err = rootsDir(usrUpper); err == nil {
		o.work, err = rootsDir(usrWork)
	}
	if err != nil {
		o.close()
		return nil, fmt.Errorf("/usr: %w", err)
	}
	for _, rel := range hidden {
		if err := whiteout(o.upper, "/usr", rel, 0); err != nil {
			o.close()
			return nil, fmt.Errorf("/usr: hide %s: %w", rel, err)
		}
	}
	return o, nil
}

// whiteout hides the lower layer's rel in the upper layer (a directory):
// a whiteout, unless the upper layer has something there already, which
// hides it as well (a directory there is made opaque: one a snapshot
// brought back has lost its mark). The directories on the way are made
// as owner's (root inside: 0 in the init, the block's first id on the
// host), with the modes of lower's (the layer's host directory); a link
// on the way is the code's, and is never followed.
func whiteout(upper int, lower, rel string, owner int) error {
	parts := strings.Split(rel, "/")
	dir, err := unix.Dup(upper)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(dir) }()
	for i, name := range parts {
		last := i == len(parts)-1
		var st unix.Stat_t
		switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case errors.Is(err, unix.ENOENT) && last:
			return unix.Mknodat(dir, name, unix.S_IFCHR, 0)
		case errors.Is(err, unix.ENOENT):
			var host unix.Stat_t
			if err := unix.Lstat(lower+"/"+strings.Join(parts[:i+1], "/"), &host); err != nil {
				return err
			}
			if err := unix.Mkdirat(dir, name, host.Mode&0o7777); err != nil {
				return err
			}
			if err := unix.Fchownat(dir, name, owner, owner, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		case err != nil:
			return err
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return nil // a file, a link or a whiteout hides what lies below
		case last:
			fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Fsetxattr(fd, "user.overlay.opaque", []byte("y"), 0)
		}
		next, err := unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		_ = unix.Close(dir)
		dir = next
	}
	return nil
}

func (o *usrOverlay) close() { closeLayers(&o.lower, &o.upper, &o.work) }

// mount attaches the idmapped /usr at the root's /usr and mounts the
// overlay over it.
func (o *usrOverlay) mount() error {
	defer o.close()
	dst := newRoot + "/usr"
	if err := makeMountPoint(dst, true); err != nil {
		return err
	}
	if err := unix.MoveMount(o.lower, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("/usr: attach the host's: %w", err)
	}
	if err := mountOverlay(dst, o.upper, o.work); err != nil {
		return fmt.Errorf("/usr: %w", err)
	}
	return nil
}
