package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A machine's own root (Spec.MachineRoot) is a host directory that the
// sandbox's / is, writable: what the code makes at the top of its tree
// (/workspace, /app) lands there and stays across restarts, and the file
// API reaches it. The sandbox's skeleton is built over it as over the
// usual tmpfs: the system directories, /etc, /dev, /proc, /tmp, the home,
// the binds. So the supervisor first removes from it every top-level
// name the skeleton places; those are rebuilt at each start.

// skeletonNames are the top-level names the init places in a sandbox of
// spec.
func skeletonNames(spec Spec) ([]string, error) {
	names := map[string]bool{"etc": true, "dev": true, "proc": true, "tmp": true}
	add := func(p string) {
		if first, _, _ := strings.Cut(strings.TrimPrefix(filepath.Clean(p), "/"), "/"); first != "" {
			names[first] = true
		}
	}
	for _, d := range hostSystemDirs {
		add(d)
	}
	add(HomeOf(spec.Home))
	for _, p := range spec.ReadOnlyBinds {
		add(p)
	}
	for _, b := range spec.Binds {
		add(b.Path)
	}
	for p := range spec.Links {
		add(p)
	}
	if spec.RootInside {
		add(SudoPath)
	}
	if spec.Root != "" {
		top, _, err := RootTopLevel(spec.Root, spec.Home)
		if err != nil {
			return nil, err
		}
		for _, m := range top {
			add(m.Path)
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	return out, nil
}

// clearSkeleton removes the skeleton's names from the machine's root
// dir on the host (what the last start placed there, or what the code
// made under those names), but for the entries keep names below a
// directory (a writable /usr/local's layers). The directory is the
// sandbox's to write: it must be a directory, not a link, and nothing
// below it is followed.
func clearSkeleton(dir string, names []string, keep map[string][]string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("jail: machine root %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("jail: machine root %s is not a directory", dir)
	}
	for _, n := range names {
		if kept := keep[n]; len(kept) > 0 {
			if err := clearBut(filepath.Join(dir, n), kept); err != nil {
				return err
			}
			continue
		}
		// RemoveAll unlinks a link itself and opens nothing through one.
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("jail: clear the machine root's %s: %w", n, err)
		}
	}
	return nil
}

// clearBut empties dir but for the entries kept; dir itself goes unless
// it is a directory (a link is never followed).
func clearBut(dir string, kept []string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("jail: clear the machine root's %s: %w", filepath.Base(dir), err)
	case !fi.IsDir():
		return os.RemoveAll(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("jail: clear the machine root's %s: %w", filepath.Base(dir), err)
	}
	for _, e := range entries {
		if !slices.Contains(kept, e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("jail: clear the machine root's %s: %w", filepath.Base(dir), err)
			}
		}
	}
	return nil
}

// openMachineRoot clears spec's machine root and returns a detached clone
// of it for the init to attach at /, or, rootless, its path for the init
// to open.
func openMachineRoot(spec Spec) (*os.File, string, error) {
	names, err := skeletonNames(spec)
	if err != nil {
		return nil, "", err
	}
	keep := map[string][]string{}
	if spec.RootInside {
		// usrlocal_linux.go's, usroverlay_linux.go's and etcoverlay_linux.go's.
		keep["usr"] = []string{filepath.Base(usrLocalUpper), filepath.Base(usrLocalWork), filepath.Base(usrUpper), filepath.Base(usrWork),
			filepath.Base(etcUpper), filepath.Base(etcWork)}
	}
	if err := clearSkeleton(spec.MachineRoot, names, keep); err != nil {
		return nil, "", err
	}
	fd, err := unix.Open(spec.MachineRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("jail: open machine root %s: %w", spec.MachineRoot, err)
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	switch {
	case err == nil:
		return os.NewFile(uintptr(tree), spec.MachineRoot), "", nil
	case errors.Is(err, unix.EPERM):
		return nil, spec.MachineRoot, nil
	}
	return nil, "", fmt.Errorf("jail: clone machine root mount: %w", err)
}

// mountRootBase mounts what the sandbox's / is built on at newRoot: a
// fresh tmpfs, or a machine's own root (writable, programs allowed there,
// never set-user-ID ones or devices).
func mountRootBase(cfg *initConfig) error {
	switch {
	case cfg.MachineRootFD > 0:
		if err := unix.MoveMount(cfg.MachineRootFD, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach the machine's root: %w", err)
		}
		_ = unix.Close(cfg.MachineRootFD)
	case cfg.MachineRootPath != "":
		fd, err := unix.Open(cfg.MachineRootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the machine's root: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fd), newRoot, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the machine's root: %w", err)
		}
	default:
		if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4m,nr_inodes=4096,mode=0755"); err != nil {
			return fmt.Errorf("mount root tmpfs: %w", err)
		}
		return nil
	}
	return unix.MountSetattr(-1, newRoot, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Attr_clr: unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_RDONLY})
}

// placeLinks places a machine's links (Spec.Links) in its root.
func placeLinks(links map[string]string) error {
	for p, target := range links {
		dst := newRoot + p
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("link %s: %w", p, err)
		}
		if err := os.Symlink(target, dst); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("link %s: %w", p, err)
		}
	}
	return nil
}

// checkLinks refuses links outside /opt/codecage, or not absolute.
func checkLinks(links map[string]string) error {
	for p, target := range links {
		if !strings.HasPrefix(p, "/opt/codecage/") || filepath.Clean(p) != p || strings.Contains(p, "..") || target == "" {
			return fmt.Errorf("jail: link %q -> %q: links go under /opt/codecage", p, target)
		}
	}
	return nil
}
