package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// newRoot is where the sandbox root is assembled before pivot_root. It sits
// in the init's private mount namespace, so the host never sees it.
const newRoot = "/tmp"

// hostEtcFiles are copied (not bound) into the generated /etc.
var hostEtcFiles = []string{"/etc/ld.so.cache"}

// devNodes are bound from the host /dev into the sandbox's tmpfs /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom"}

const (
	roFlags = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	// scratchFlags are for the writable tmpfs mounts: nothing there may be
	// executed or carry privilege.
	scratchFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	// scratchAttrs are scratchFlags as mount attributes, for a bind.
	scratchAttrs = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC
)

// scratchFlags are the mount flags of the workspace and /tmp: a machine's
// may hold programs (./run.sh, a compiled binary), never set-user-ID ones
// or devices.
func (cfg *initConfig) scratchFlags() uintptr {
	if cfg.Machine {
		return scratchFlags &^ unix.MS_NOEXEC
	}
	return scratchFlags
}

// scratchAttrs are scratchFlags as mount attributes.
func (cfg *initConfig) scratchAttrs() uint64 {
	if cfg.Machine {
		return scratchAttrs &^ unix.MOUNT_ATTR_NOEXEC
	}
	return scratchAttrs
}

// execAttrs clears noexec from a machine's workspace and /tmp, which the
// host mounts noexec.
func (cfg *initConfig) execAttrs() uint64 {
	if cfg.Machine {
		return unix.MOUNT_ATTR_NOEXEC
	}
	return 0
}

// hasMachineRoot: / is a machine's own root (Spec.MachineRoot).
func (cfg *initConfig) hasMachineRoot() bool {
	return cfg.MachineRootFD > 0 || cfg.MachineRootPath != ""
}

// hasTerminals: the sandbox has a devpts of its own, for the program's
// terminal, or for those a machine's processes are started on.
func (cfg *initConfig) hasTerminals() bool { return cfg.Terminal != nil || cfg.Machine }

// isSharedTmp reports whether Binds[i] is the session's /tmp.
func (cfg *initConfig) isSharedTmp(i int) bool {
	return cfg.SharedTmp && i == len(cfg.Binds)-1
}

// buildRoot assembles the sandbox root and pivots into it. It runs in the
// init, as uid 1000 holding capabilities in its own user namespace.
func buildRoot(cfg *initConfig) error {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	src, err := openHostSources(cfg)
	if err != nil {
		return err
	}
	defer src.close()
	if err := mountRootBase(cfg); err != nil {
		return err
	}
	usr, usrLocal, err := openWritableUsr(cfg)
	if err != nil {
		return err
	}
	if err := placeSystem(cfg, src, usr); err != nil {
		return err
	}
	if usrLocal != nil {
		if err := usrLocal.mount(); err != nil {
			return err
		}
	}
	if err := buildDev(cfg); err != nil {
		return err
	}
	if err := placeBinds(cfg, src); err != nil {
		return err
	}
	if err := placeLinks(cfg.Links); err != nil {
		return err
	}
	if cfg.RootInside {
		if cfg.sudo, err = placeSudo(sudoPython(cfg.Links)); err != nil {
			return err
		}
	}
	if !cfg.SharedTmp {
		tmpOpts := fmt.Sprintf("size=%d,nr_inodes=65536,mode=1777", cfg.TmpBytes)
		if err := mountTmpfsFlags(newRoot+"/tmp", tmpOpts, cfg.scratchFlags()); err != nil {
			return err
		}
	}
	if err := buildWorkspace(cfg, src.workspace); err != nil {
		return err
	}
	if cfg.Machine {
		if cfg.proc, err = mountMachineProc(cfg); err != nil {
			return err
		}
	} else if err := mountProc(); err != nil {
		return err
	}
	if cfg.Nested {
		if err := prepareNested(cfg); err != nil {
			return err
		}
	}
	if err := pivot(); err != nil {
		return err
	}
	if cfg.hasMachineRoot() {
		return nil // the machine's own, writable
	}
	// The root tmpfs only holds mount points and /etc: freeze it.
	if err := unix.MountSetattr(-1, "/", 0, &unix.MountAttr{Attr_set: roFlags}); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	return nil
}

// placeSystem places what the sandbox runs from: the host's system
// directories, or the resolved programs, or an environment's root (with
// the programs over it), and the generated /etc.
func placeSystem(cfg *initConfig, src *hostSources, usr *usrOverlay) error {
	hasRoot := cfg.HasRoot
	if cfg.Programs == nil && !hasRoot {
		for _, dir := range hostSystemDirs {
			if dir == "/usr" && usr != nil {
				if err := usr.mount(); err != nil {
					return err
				}
				continue
			}
			if err := placeSystemDir(dir); err != nil {
				return err
			}
		}
	}
	if usr != nil && (cfg.Programs != nil || hasRoot) {
		usr.close() // not the host's system directories: never asked for
	}
	if err := buildEtc(cfg); err != nil {
		return err
	}
	if cfg.Programs != nil {
		if err := placePrograms(cfg.Programs, !hasRoot); err != nil {
			return err
		}
	}
	if hasRoot {
		entries, fds := cfg.RootEntries, []int(nil)
		if cfg.RootPath != "" {
			entries, fds = src.rootEntries, src.root
		}
		if err := placeRoot(cfg, entries, fds); err != nil {
			return err
		}
	}
	return nil
}

// placeBinds binds the read-only host paths, then Spec.Binds (the
// session's shared /tmp among them, writable).
func placeBinds(cfg *initConfig, src *hostSources) error {
	for _, p := range cfg.ReadOnlyBinds {
		if err := bindReadOnly(p, newRoot+p); err != nil {
			return err
		}
	}
	for i, b := range cfg.Binds {
		flags, clr := uint64(roFlags), uint64(0)
		if cfg.isSharedTmp(i) {
			flags, clr = cfg.scratchAttrs(), cfg.execAttrs() // the session's /tmp, as writable as a tmpfs one
		}
		if err := attachBind(src.binds[i], fdBinds+i, newRoot+b.Path, flags, clr); err != nil {
			return fmt.Errorf("bind %s: %w", b.Host, err)
		}
	}
	return nil
}

// mountProc mounts the sandbox's /proc. The init is already PID 1 of the
// sandbox's pid namespace, so this proc shows only the sandbox. It is
// mounted before pivot_root because the kernel allows a proc mount in a
// user namespace only while a full proc is visible in the mount namespace.
func mountProc() error {
	if err := os.Mkdir(newRoot+"/proc", 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", newRoot+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ProcOptions); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// hostSources are descriptors of host directories the root binds, opened
// before the root tmpfs hides the host's /tmp, where they may live.
type hostSources struct {
	workspace int   // -1 when there is none
	binds     []int // per cfg.Binds; -1 for those the supervisor mounted
	// rootEntries and root: Spec.Root's entries and a descriptor of each
	// that is no link, when the init opened the root itself (rootless).
	rootEntries []rootEntry
	root        []int
}

// openHostSources opens the workspace and the bind sources the init opens
// itself (rootless).
func openHostSources(cfg *initConfig) (*hostSources, error) {
	src := &hostSources{workspace: -1, binds: make([]int, len(cfg.Binds))}
	for i := range src.binds {
		src.binds[i] = -1
	}
	if cfg.WorkspacePath != "" {
		fd, err := unix.Openat2(unix.AT_FDCWD, cfg.WorkspacePath, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return nil, fmt.Errorf("open workspace: %w", err)
		}
		src.workspace = fd
	}
	for i, b := range cfg.Binds {
		if i < len(cfg.BindMounts) && cfg.BindMounts[i] {
			continue
		}
		fd, err := unix.Open(b.Host, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			src.close()
			return nil, fmt.Errorf("bind %s: %w", b.Host, err)
		}
		src.binds[i] = fd
	}
	if cfg.RootPath != "" {
		var err error
		if src.rootEntries, src.root, err = openInitRoot(cfg); err != nil {
			src.close()
			return nil, err
		}
	}
	return src, nil
}

// close closes every descriptor opened.
func (src *hostSources) close() {
	if src.workspace >= 0 {
		unix.Close(src.workspace)
	}
	for _, fd := range src.binds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	for _, fd := range src.root {
		unix.Close(fd)
	}
}

// attachBind mounts one of Spec.Binds at dst with attrs: the detached mount
// at treeFD, or (rootless) the directory the init opened, at openFD.
func attachBind(openFD, treeFD int, dst string, attrs, clr uint64) error {
	if openFD >= 0 {
		return bindWith(fmt.Sprintf("/proc/self/fd/%d", openFD), dst, attrs)
	}
	if err := makeMountPoint(dst, true); err != nil {
		return err
	}
	if err := unix.MoveMount(treeFD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return err
	}
	_ = unix.Close(treeFD)
	return unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attrs, Attr_clr: clr})
}

// placePrograms builds a minimal root: the symlinks that lead to the
// programs and their libraries, then (bind, from the host; else they come
// from Spec.Root, see placeRoot) each file read-only at its own path.
func placePrograms(p *Programs, bind bool) error {
	links := make([]string, 0, len(p.Links))
	for l := range p.Links {
		links = append(links, l)
	}
	sort.Strings(links) // parents before children
	for _, l := range links {
		if err := os.MkdirAll(filepath.Dir(newRoot+l), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(p.Links[l], newRoot+l); err != nil && !os.IsExist(err) {
			return fmt.Errorf("link %s: %w", l, err)
		}
	}
	for _, list := range [][]string{p.Exec, p.Files} {
		for _, f := range list {
			if !bind {
				break
			}
			if err := bindReadOnly(f, newRoot+f); err != nil {
				return err
			}
		}
	}
	return nil
}

func placeSystemDir(dir string) error {
	fi, err := os.Lstat(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(dir)
		if err != nil {
			return err
		}
		return os.Symlink(target, newRoot+dir)
	}
	return bindReadOnly(dir, newRoot+dir)
}

// bindReadOnly binds src at dst (creating dst) and makes the whole subtree
// read-only, nosuid and nodev. mount_setattr with AT_RECURSIVE covers every
// submount and, unlike a bind remount, never has to repeat locked flags.
func bindReadOnly(src, dst string) error { return bindWith(src, dst, roFlags) }

// bindWith binds src at dst with the mount attributes attrs.
func bindWith(src, dst string, attrs uint64) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := makeMountPoint(dst, fi.IsDir()); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attrs}); err != nil {
		return fmt.Errorf("set the attributes of %s: %w", src, err)
	}
	return nil
}

func makeMountPoint(dst string, dir bool) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		return nil
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func mountTmpfs(dst, opts string) error { return mountTmpfsFlags(dst, opts, scratchFlags) }

func mountTmpfsFlags(dst, opts string, flags uintptr) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dst, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("mount tmpfs %s: %w", dst, err)
	}
	return nil
}

func buildDev(cfg *initConfig) error {
	dev := newRoot + "/dev"
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	// No nodev here: the bound host nodes must keep working. Nothing else can
	// become a device: mknod of devices needs a capability the sandbox lacks.
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	nodes := devNodes
	if cfg.hasTerminals() {
		// The program's controlling terminal by its usual name (the host
		// node names each process's own terminal, here the sandbox's).
		nodes = append(slices.Clip(nodes), "tty")
		if err := mountDevpts(dev); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		dst := filepath.Join(dev, n)
		if err := makeMountPoint(dst, false); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
		if err := unix.MountSetattr(-1, dst, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}); err != nil {
			return fmt.Errorf("restrict /dev/%s: %w", n, err)
		}
	}
	links := map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	shmOpts := fmt.Sprintf("size=%d,nr_inodes=4096,mode=1777", cfg.TmpBytes)
	if err := mountTmpfs(dev+"/shm", shmOpts); err != nil {
		return err
	}
	return unix.MountSetattr(-1, dev, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
}

func buildWorkspace(cfg *initConfig, wsFD int) error {
	dst := newRoot + cfg.Home
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	switch {
	case cfg.HasWorkspace:
		if err := unix.MoveMount(fdWorkspace, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach workspace: %w", err)
		}
	case wsFD >= 0:
		// The descriptor was opened in this mount namespace, so it can be
		// bound; binding it, not the path, keeps a swapped symlink out.
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(wsFD), dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind workspace: %w", err)
		}
	default:
		opts := fmt.Sprintf("size=%d,nr_inodes=65536,mode=0755,uid=%d,gid=%d", cfg.WorkspaceBytes, SandboxUID, SandboxUID)
		return mountTmpfsFlags(dst, opts, cfg.scratchFlags())
	}
	return unix.MountSetattr(-1, dst, 0, &unix.MountAttr{Attr_set: cfg.scratchAttrs(), Attr_clr: cfg.execAttrs()})
}

// ProcOptions mounts the sandbox's /proc with its processes alone
// (/proc/<pid>, self, thread-self; Linux 5.8+): none of the host-wide files
// (cmdline, stat, meminfo, cpuinfo, pressure, diskstats, sys, kcore, ...).
// What programs read there has other sources inside: os.cpu_count() and
// libc's CPU count fall back to sched_getaffinity, and joblib and loky read
// the sandbox's limits from /proc/self/cgroup. psutil's host-wide calls
// (virtual_memory, cpu_times) fail; a sandbox has no business reading the
// host's load. A machine's proc is another (mountMachineProc).
const ProcOptions = "subset=pid"

// pivot makes newRoot the root and detaches the old one, so no path inside
// leads back to the host's filesystem.
func pivot() error {
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// limitNestedUserNamespaces sets the sandbox's own user namespace limit,
// per uid in it: none for a sandbox; for a zygote whose cells have uids of
// their own, a few per cell uid, as each cell moves into a user namespace
// of its own (where it is uid SandboxUID; a namespace is freed a moment
// after its cell ends, and the uid may be given to the next cell
// meanwhile). A cell's code cannot make one: its count is then spent, and
// seccomp refuses the calls anyway.
func limitNestedUserNamespaces(cfg *initConfig) error {
	n := "0\n"
	if cfg.CellUIDs > 0 {
		n = "4\n"
	}
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte(n), 0); err != nil {
		return fmt.Errorf("limit nested user namespaces: %w", err)
	}
	return nil
}
