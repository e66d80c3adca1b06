package gvisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
)

// A gVisor machine with root inside runs on a root of its own on the host
// (jail.Spec.MachineRoot), laid out as a native machine's: what its code
// makes at /, in /tmp, /var and /root lies in that directory, /usr and
// /etc are overlays whose upper layers lie under its usr, and runsc
// overlays nothing (--overlay2=none), its gofer writing through. So the
// file API reaches the machine's whole tree as on a native one, the
// session's disk quota counts it, a park, snapshot or fork keeps it with
// the session's root, and an interpreter's restart loses none of it.
//
// The host's files never change: /usr's lower layer is a read-only,
// idmapped clone of the host's (its root shows as root inside, so a
// copy-up keeps owners and root inside may change any file of it, in its
// upper layer); what others may not read there is hidden (a whiteout).
// The root is written by the writer (ownroothelper_linux.go), which has
// no host privilege; the supervisor only mounts, each time on a directory
// it opened without following a link, so a link the code planted in its
// root never leads a mount onto the host's tree.

// ownsRoot reports whether a machine of spec runs on its own root.
func ownsRoot(spec jail.Spec, who identity) bool {
	return spec.Machine && spec.MachineRoot != "" && who.rootInside()
}

// usrHiddenOf lists what others may not read in an environment's /usr,
// scanned once per directory (an environment's root does not change).
var usrHiddenOf sync.Map // host directory -> []string

func hiddenIn(dir string) ([]string, error) {
	if v, ok := usrHiddenOf.Load(dir); ok {
		return v.([]string), nil
	}
	hidden, err := jail.HiddenEntries(dir)
	if err != nil {
		return nil, err
	}
	usrHiddenOf.Store(dir, hidden)
	return hidden, nil
}

// placeOwnRoot makes the machine's root from skel (the skeleton the bundle
// made: /etc, links, mount points, root inside's) and binds it at root,
// the bundle's root, with the system directories (system, read-only binds
// of the host's or the environment's) mounted in it on the host: /usr as
// the overlay where its idmapped clone can be made, else read-only as
// the others.
func placeOwnRoot(skel, root string, spec jail.Spec, who identity, system []ociMount) error {
	job := ownRootJob{Root: "/proc/self/fd/4", Skel: "/proc/self/fd/5", HostStatus: spec.Root == "", Alternatives: spec.Root == ""}
	for _, m := range system {
		if m.Destination != "/usr" {
			continue
		}
		// Unscannable (too big): /usr stays read-only, as natively.
		if hidden, err := hiddenIn(m.Source); err == nil {
			job.Hidden, job.Lower = hidden, m.Source
		}
	}
	// The writer gets the root and the skeleton open (the block's ids may
	// not search the directories above them: a test's are 0700).
	ownDir, err := os.OpenFile(spec.MachineRoot, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("gvisor: the machine's root: %w", err)
	}
	defer ownDir.Close()
	skelDir, err := os.OpenFile(skel, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("gvisor: the machine's skeleton: %w", err)
	}
	defer skelDir.Close()
	own := int(ownDir.Fd())
	ns, err := runOwnRootWriter(job, who.first, ownDir, skelDir)
	if err != nil {
		return err
	}
	defer unix.Close(ns)
	if err := bindOwnRoot(own, root); err != nil {
		return err
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("gvisor: the machine's root: %w", err)
	}
	defer unix.Close(rootFD)
	if err := bindTmp(rootFD, filepath.Join(filepath.Dir(root), ownTmp)); err != nil {
		return err
	}
	usrUp, usrWk, etcUp, etcWk := jail.MachineLayers()
	if err := overlayAt(rootFD, "etc", own, etcUp, etcWk, nil); err != nil {
		return fmt.Errorf("gvisor: the machine's /etc: %w", err)
	}
	for _, m := range system {
		if m.Destination == "/usr" && job.Lower != "" {
			tree, err := jail.IdmappedTree(m.Source, ns)
			if err == nil {
				err = overlayAt(rootFD, "usr", own, usrUp, usrWk, tree)
				if err != nil {
					return fmt.Errorf("gvisor: the machine's /usr: %w", err)
				}
				continue
			}
		}
		if err := readOnlyAt(rootFD, m); err != nil {
			return err
		}
	}
	return nil
}

// runOwnRootWriter runs the writer for job as root of a user namespace
// mapping the block from first on, and returns that namespace (for the
// idmapped /usr), once the writer is done.
func runOwnRootWriter(job ownRootJob, first int, root, skel *os.File) (int, error) {
	cmd, err := ownRootWriter(first, root, skel)
	if err != nil {
		return -1, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &out
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("gvisor: the machine's root: %w", err)
	}
	// The writer waits for its job: its namespace is there to open.
	ns, nsErr := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	err = job.send(stdin)
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("%v: %s", werr, strings.TrimSpace(out.String()))
	}
	switch {
	case err == nil && nsErr != nil:
		err = nsErr
	case err != nil && nsErr == nil:
		_ = unix.Close(ns)
	}
	if err != nil {
		return -1, fmt.Errorf("gvisor: the machine's root: %s", truncate(err.Error(), 2000))
	}
	return ns, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// bindOwnRoot binds the machine's root (own, a descriptor) at root, the
// bundle's, private (what is mounted in the bundle never shows in the
// session's directory, where the file API and a park read it), nosuid and
// nodev, programs allowed.
func bindOwnRoot(own int, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(fdPath(own), root, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("gvisor: bind the machine's root: %w", err)
	}
	if err := unix.Mount("", root, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("gvisor: the machine's root private: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Attr_clr: unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(-1, root, 0, attr); err != nil {
		return fmt.Errorf("gvisor: the machine's root: %w", err)
	}
	return nil
}

// ownTmp is where, in the bundle, the root's /tmp is bound for runsc (an
// explicit /tmp mount: runsc mounts a tmpfs of its own over an empty /tmp
// of the root, which would hide it from the host and from a park).
const ownTmp = "roottmp"

// bindTmp binds the root's tmp (opened without following a link) at dst.
func bindTmp(rootFD int, dst string) error {
	tmp, err := beneath(rootFD, "tmp")
	if err != nil {
		return fmt.Errorf("gvisor: the machine's /tmp: %w", err)
	}
	defer unix.Close(tmp)
	if err := unix.Mount(fdPath(tmp), dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("gvisor: bind the machine's /tmp: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Attr_clr: unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(-1, dst, 0, attr); err != nil {
		return fmt.Errorf("gvisor: the machine's /tmp: %w", err)
	}
	return nil
}

// beneath opens rel below the directory dir (descriptors), following no
// link: the root is the code's, and a mount must land where it is meant.
func beneath(dir int, rel string) (int, error) { return openBeneath(dir, rel, unix.O_DIRECTORY) }

// openBeneath is beneath for a file as well (flags 0) as a directory.
func openBeneath(dir int, rel string, flags uint64) (int, error) {
	return unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | flags,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// errNoRootView: the sandbox's tree lives in gVisor's kernel alone.
var errNoRootView = errors.New("gvisor: the sandbox's own tree is in its kernel")

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// overlayAt mounts an overlay at rel of the bundle's root whose upper and
// work directories are the machine root's (own) up and wk, over lower
// (a detached tree, attached there first), or over what rel shows.
func overlayAt(rootFD int, rel string, own int, up, wk string, lower *os.File) error {
	if lower != nil {
		defer lower.Close()
		at, err := beneath(rootFD, rel)
		if err != nil {
			return err
		}
		err = unix.MoveMount(int(lower.Fd()), "", at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		_ = unix.Close(at)
		if err != nil {
			return fmt.Errorf("attach the lower layer: %w", err)
		}
	}
	upper, err := beneath(own, up)
	if err != nil {
		return err
	}
	defer unix.Close(upper)
	work, err := beneath(own, wk)
	if err != nil {
		return err
	}
	defer unix.Close(work)
	at, err := beneath(rootFD, rel)
	if err != nil {
		return err
	}
	defer unix.Close(at)
	return jail.MountOverlay(fdPath(at), upper, work)
}

// readOnlyAt binds m's source at its destination in the bundle's root,
// recursively, read-only, nosuid and nodev.
func readOnlyAt(rootFD int, m ociMount) error {
	at, err := openBeneath(rootFD, strings.TrimPrefix(m.Destination, "/"), 0) // a file too (an image's ld.so.cache)
	if err != nil {
		return fmt.Errorf("gvisor: bind %s: %w", m.Source, err)
	}
	defer unix.Close(at)
	tree, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("gvisor: bind %s: %w", m.Source, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("gvisor: bind %s read-only: %w", m.Source, err)
	}
	if err := unix.MoveMount(tree, "", at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("gvisor: bind %s: %w", m.Source, err)
	}
	return nil
}

// ownRootWriter is the writer's command, as root of a new user namespace
// mapping the block from first on, with the machine's root and skeleton
// open as its descriptors 4 and 5.
func ownRootWriter(first int, root, skel *os.File) (*exec.Cmd, error) {
	// Through the descriptor: the block's ids may not search the
	// binary's directory (a test's build directory is 0700).
	cmd := &exec.Cmd{Path: "/proc/self/fd/3", Args: []string{"codecage", ownRootArg}, ExtraFiles: []*os.File{jail.Executable(), root, skel}}
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = writerAttr(first)
	return cmd, nil
}

// OpenRootDir opens dir of the sandbox's tree as its processes see it,
// for reading: on a machine with its own root, its /usr and /etc with
// root's changes are mounted on the host, in the bundle's root.
func (s *Sandbox) OpenRootDir(dir string) (*os.File, error) {
	if !s.ownRoot {
		return nil, errNoRootView
	}
	root, err := unix.Open(filepath.Join(s.dir, "rootfs"), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, jail.ErrEnded
	}
	defer unix.Close(root)
	return jail.OpenInRoot(root, dir)
}
