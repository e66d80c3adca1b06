package gvisor

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/jail/seccomp"
)

// The parts of an OCI runtime configuration that a sandbox uses.
type ociSpec struct {
	OCIVersion string     `json:"ociVersion"`
	Process    ociProcess `json:"process"`
	Root       ociRoot    `json:"root"`
	Hostname   string     `json:"hostname"`
	Mounts     []ociMount `json:"mounts"`
	Linux      ociLinux   `json:"linux"`
}

type ociProcess struct {
	Terminal        bool            `json:"terminal"`
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
	Capabilities    ociCapabilities `json:"capabilities"`
	Rlimits         []ociRlimit     `json:"rlimits"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ociCapabilities are all empty: the program holds no capability even
// inside gVisor's kernel.
type ociCapabilities struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Permitted   []string `json:"permitted"`
	Inheritable []string `json:"inheritable"`
	Ambient     []string `json:"ambient"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces  []ociNamespace `json:"namespaces"`
	UIDMappings []ociIDMapping `json:"uidMappings,omitempty"`
	GIDMappings []ociIDMapping `json:"gidMappings,omitempty"`
	Seccomp     *seccomp.OCI   `json:"seccomp"`
}

type ociIDMapping struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

// systemDirs are bound read-only when they are real directories on the
// host, and recreated as the same symlink when they are links (merged /usr).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcDirs are bound read-only from the host: Debian resolves libraries such
// as BLAS through /etc/alternatives.
var etcDirs = []string{"/etc/alternatives"}

const hostname = "sandbox"

// writeBundle makes dir a bundle for spec: dir/rootfs, a root of empty
// mount points and a generated /etc, and dir/config.json. It returns the
// mounts, in order.
func writeBundle(dir string, spec jail.Spec, who identity) ([]ociMount, error) {
	root := filepath.Join(dir, "rootfs")
	// A machine on its own root (ownroot_linux.go) has its skeleton made
	// here first, then copied into its root.
	own := ownsRoot(spec, who)
	build := root
	if own {
		build = filepath.Join(dir, "skel")
	}
	if err := os.MkdirAll(build, 0o755); err != nil {
		return nil, err
	}
	mounts, err := hostMounts(build, spec, who)
	if err != nil {
		return nil, err
	}
	system, mounts, err := rootInsideTree(root, build, own, spec, who, mounts)
	if err != nil {
		return nil, err
	}
	// Order matters: later mounts go on top of earlier ones.
	relay := ""
	if spec.Terminal != nil {
		if relay, err = relayBinary(); err != nil {
			return nil, err
		}
	}
	if spec.Machine && spec.Workspace != "" {
		if spec.Workspace, err = execBind(dir, spec.Workspace); err != nil {
			return nil, err
		}
	}
	if own {
		if err := os.Mkdir(filepath.Join(dir, ownTmp), 0o755); err != nil {
			return nil, err
		}
	}
	mounts = append(mounts, sandboxMounts(dir, spec, who.user(), relay, own)...)
	for _, m := range append(system, mounts...) {
		if err := mountPoint(build, m); err != nil {
			return nil, err
		}
	}
	if own {
		if err := placeOwnRoot(build, root, spec, who, system); err != nil {
			return nil, err
		}
	} else if spec.Machine {
		// A machine's / is its user's, as a native machine's own root:
		// it makes /workspace or /app there (in the overlay).
		if err := os.Chown(root, who.host, who.host); err != nil {
			return nil, err
		}
	}
	// The jail's seccomp rules, applied by gVisor's kernel: what the code
	// may ask of it is no more than what it may ask of the host's.
	filter, err := seccomp.BuildOCI(seccomp.Options{})
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(ociConfig(root, spec, who, mounts, filter))
	if err != nil {
		return nil, err
	}
	return mounts, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// rootInsideTree gives a root-inside machine's tree (made at build) to
// root inside and takes the system's directories out of the mounts runsc
// makes: on its own root they are mounted on the host (system,
// placeOwnRoot), else bound into the bundle's root, which runsc overlays
// with memory.
func rootInsideTree(root, build string, own bool, spec jail.Spec, who identity, mounts []ociMount) (system, rest []ociMount, err error) {
	if !who.rootInside() {
		return nil, mounts, nil
	}
	if own {
		// Its /etc/alternatives are root's to change, in its /etc: the
		// writer copies them there.
		mounts = slices.DeleteFunc(mounts, func(m ociMount) bool { return slices.Contains(etcDirs, m.Destination) })
	}
	if err := rootsOwnTree(build, who.first, spec.Root == "" && !own); err != nil {
		return nil, nil, err
	}
	if own {
		return mounts, nil, nil
	}
	// The system's directories become part of the bundle's root, which
	// runsc overlays with memory: root inside writes /usr/local, /etc or
	// /usr, and the host's never change (a read-only bind beneath, and the
	// gofer is the block's first id, which may write none of them).
	for _, m := range mounts {
		if err := systemBind(root, m); err != nil {
			return nil, nil, err
		}
	}
	return nil, nil, nil
}

// roBind is a read-only bind of host at path.
func roBind(host, path string) ociMount {
	return ociMount{Destination: path, Type: "bind", Source: host, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
}

// hostMounts binds what the sandbox sees of the host, read-only: the
// system directories (or, for a minimal root, only the programs' files),
// and writes root's symlinks and generated /etc on the way.
func hostMounts(root string, spec jail.Spec, who identity) ([]ociMount, error) {
	var mounts []ociMount
	ro := func(host, path string) { mounts = append(mounts, roBind(host, path)) }
	if spec.Programs != nil && spec.Programs.Root != spec.Root {
		return nil, fmt.Errorf("gvisor: the programs were resolved in root %q, the sandbox's root is %q", spec.Programs.Root, spec.Root)
	}
	for _, d := range systemDirs {
		if spec.Programs != nil || spec.Root != "" {
			break // a minimal root, or an environment's, instead: below
		}
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
				return nil, err
			}
		case fi.IsDir():
			ro(d, d)
		}
	}
	if err := writeEtc(root, who, jail.HomeOf(spec.Home), spec.Root == ""); err != nil {
		return nil, err
	}
	for _, d := range etcDirs {
		if spec.Programs != nil || spec.Root != "" {
			break // the programs' own links, or the root's, instead
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			ro(d, d)
		}
	}
	if spec.Machine {
		// A machine's other names of its programs (python), in its root,
		// and root's home.
		if err := placeLinks(root, spec.Links); err != nil {
			return nil, err
		}
		if err := os.Mkdir(filepath.Join(root, "root"), 0o700); err != nil && !os.IsExist(err) {
			return nil, err
		}
		if who.rootInside() {
			if err := placeSudo(root, spec.Argv[0]); err != nil {
				return nil, err
			}
		}
	}
	if p := spec.Programs; p != nil {
		if err := placeLinks(root, p.Links); err != nil {
			return nil, err
		}
		// Libraries stay mappable as code: gVisor refuses executable
		// mappings from noexec mounts, as Linux does. It has no Landlock,
		// so they could be executed too; the loader (a program of every
		// list) runs any of them all the same, in the jail as well.
		for _, list := range [][]string{p.Exec, p.Files} {
			for _, f := range list {
				if spec.Root == "" {
					ro(f, f)
				}
			}
		}
	}
	if spec.Root != "" {
		rm, err := rootMounts(root, spec)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, rm...)
	}
	return mounts, nil
}

// rootMounts are the mounts of an environment's root (spec.Root): the
// gofer opens each source by path, so each is the real path of what was
// opened beneath the root (jail.RootMounts), never a path through one of
// the image's symlinks; a symlink of the root is recreated in the bundle's
// root, where gVisor resolves it inside the sandbox.
func rootMounts(bundleRoot string, spec jail.Spec) ([]ociMount, error) {
	entries, err := jail.RootMounts(spec)
	if err != nil {
		return nil, err
	}
	var mounts []ociMount
	for _, e := range entries {
		if e.Link == "" {
			mounts = append(mounts, roBind(e.Source, e.Path))
			continue
		}
		dst := filepath.Join(bundleRoot, e.Path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		if err := os.Symlink(e.Link, dst); err != nil {
			return nil, fmt.Errorf("gvisor: root link %s: %w", e.Path, err)
		}
	}
	return mounts, nil
}

// sandboxMounts are the sandbox's own filesystems (/proc, /tmp, /dev/shm,
// an empty /sys, the home directory) and the binds the spec asks for.
func sandboxMounts(dir string, spec jail.Spec, uid int, relay string, ownRoot bool) []ociMount {
	var mounts []ociMount
	ro := func(host, path string) { mounts = append(mounts, roBind(host, path)) }
	l := spec.Limits
	// A machine runs its own programs from its home and /tmp (./run.sh, a
	// compiled binary); every other sandbox executes nothing there.
	exe := "noexec"
	if spec.Machine {
		exe = "exec"
	}
	tmp := ociMount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", exe, "mode=1777", "size=" + strconv.FormatInt(l.TmpBytes, 10)}}
	if spec.Tmp != "" {
		tmp = ociMount{Destination: "/tmp", Type: "bind", Source: spec.Tmp, Options: []string{"rbind", "rw", "nosuid", "nodev", exe}}
	}
	if ownRoot {
		// The root's own /tmp, bound where runsc would mount a tmpfs of
		// its own over an empty one (placeOwnRoot binds it there).
		tmp = ociMount{Destination: "/tmp", Type: "bind", Source: filepath.Join(dir, ownTmp), Options: []string{"rbind", "rw", "nosuid", "nodev", exe}}
	}
	mounts = append(mounts,
		ociMount{Destination: "/proc", Type: "proc", Source: "proc"},
		tmp,
		// gVisor's own /dev/shm is root's; POSIX shared memory and
		// semaphores (multiprocessing) need a writable one, as in the jail.
		ociMount{Destination: "/dev/shm", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "mode=1777", "size=" + strconv.FormatInt(l.TmpBytes, 10)}},
		// gVisor's /sys describes its own kernel, but the jail shows none:
		// the same here (an empty, unreadable tmpfs).
		ociMount{Destination: "/sys", Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "mode=000", "size=4k"}},
	)
	if spec.Workspace != "" {
		mounts = append(mounts, ociMount{Destination: jail.HomeOf(spec.Home), Type: "bind", Source: spec.Workspace, Options: []string{"rbind", "rw", "nosuid", "nodev", exe}})
	} else {
		mounts = append(mounts, ociMount{Destination: jail.HomeOf(spec.Home), Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", exe, "mode=0700", "uid=" + strconv.Itoa(uid), "gid=" + strconv.Itoa(uid), "size=" + strconv.FormatInt(l.WorkspaceBytes, 10)}})
	}
	for _, p := range spec.ReadOnlyBinds {
		ro(p, p)
	}
	for _, b := range spec.Binds {
		ro(b.Host, b.Path)
	}
	if spec.Forward != nil {
		ro(filepath.Join(dir, forwardDir), filepath.Dir(ForwardSocket))
	}
	if spec.Terminal != nil {
		ro(relay, relayPath)
	}
	return mounts
}

// ociConfig is the runtime spec of the sandbox's process: who it runs as,
// its limits, root, mounts, namespaces and seccomp filter.
func ociConfig(root string, spec jail.Spec, who identity, mounts []ociMount, filter *seccomp.OCI) ociSpec {
	l := spec.Limits
	args, env := spec.Argv, spec.Env
	user, caps := who.user(), []string{}
	if who.rootInside() {
		// The harness starts as root inside: its init (PID 1) serves the
		// machine's sudo, the harness becomes the user (sudod.py).
		env = sudoEnv(env, who.user())
		user, caps = 0, jail.RootInsideCapabilityNames()
	}
	if spec.Terminal != nil {
		args = relayArgv(args)
	}
	return ociSpec{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			Terminal:        spec.Terminal != nil,
			User:            ociUser{UID: uint32(user), GID: uint32(user)},
			Args:            args,
			Env:             env,
			Cwd:             jail.HomeOf(spec.Home),
			NoNewPrivileges: true,
			Capabilities:    ociCapabilities{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: []string{}, Ambient: []string{}},
			Rlimits: []ociRlimit{
				limit("RLIMIT_NOFILE", uint64(l.OpenFiles)),
				limit("RLIMIT_NPROC", uint64(l.MaxProcesses)),
				limit("RLIMIT_FSIZE", uint64(l.FileSizeBytes)),
				limit("RLIMIT_CORE", 0),
			},
		},
		// A machine's root is writable: runsc overlays it with memory
		// (globalFlags), so the bundle's root on the host never changes,
		// or it is the machine's own root on the host (ownroot_linux.go).
		Root:     ociRoot{Path: root, Readonly: !spec.Machine},
		Hostname: hostname,
		Mounts:   mounts,
		Linux:    linuxOf(who, filter),
	}
}

// linuxOf is the sandbox's namespaces (a user namespace of its own, with
// root inside) and seccomp filter.
func linuxOf(who identity, filter *seccomp.OCI) ociLinux {
	l := ociLinux{Namespaces: []ociNamespace{{"pid"}, {"network"}, {"ipc"}, {"uts"}, {"mount"}}, Seccomp: filter}
	if who.ownUserNS() {
		l.Namespaces = append(l.Namespaces, ociNamespace{"user"})
		l.UIDMappings, l.GIDMappings = who.mappings(), who.mappings()
	}
	return l
}

func limit(kind string, n uint64) ociRlimit { return ociRlimit{Type: kind, Hard: n, Soft: n} }

// placeLinks recreates the symlinks that lead to a minimal root's
// programs and libraries, as they are on the host (parents first).
func placeLinks(root string, links map[string]string) error {
	paths := make([]string, 0, len(links))
	for l := range links {
		paths = append(paths, l)
	}
	sort.Strings(paths)
	for _, l := range paths {
		dst := filepath.Join(root, l)
		if err := noLinkOnTheWay(root, filepath.Dir(dst)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(links[l], dst); err != nil && !os.IsExist(err) {
			return fmt.Errorf("gvisor: link %s: %w", l, err)
		}
	}
	return nil
}

// noLinkOnTheWay refuses a path below root that would pass through a
// symlink already in the bundle's root: creating it would follow the link,
// possibly out of the bundle, onto the host.
func noLinkOnTheWay(root, path string) error {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("gvisor: %q leaves the root", path)
	}
	cur := root
	for _, part := range strings.Split(rel, "/") {
		if part == "." || part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("gvisor: %q passes through the symlink %s", path, strings.TrimPrefix(cur, root))
		}
	}
	return nil
}

// mountPoint creates what m is mounted on: the root is read-only inside,
// so runsc could not create it there.
func mountPoint(root string, m ociMount) error {
	dst := filepath.Join(root, m.Destination)
	if !strings.HasPrefix(dst, root+"/") {
		return fmt.Errorf("gvisor: mount point %q leaves the root", m.Destination)
	}
	if err := noLinkOnTheWay(root, filepath.Dir(dst)); err != nil {
		return err
	}
	dir := true
	if m.Type == "bind" {
		fi, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("gvisor: bind %s: %w", m.Source, err)
		}
		dir = fi.IsDir()
	}
	if dir {
		return os.MkdirAll(dst, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// writeEtc writes the sandbox's /etc: an account for its uid and no
// resolver (there is no network; lookups fail at once); with hostCache,
// the host's loader cache (an environment's root binds its own).
func writeEtc(root string, who identity, home string, hostCache bool) error {
	etc := filepath.Join(root, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	passwd, group := jail.Accounts(home, who.user(), who.rootInside())
	files := map[string]string{
		"passwd":        passwd,
		"group":         group,
		"hosts":         "127.0.0.1\tlocalhost " + hostname + "\n::1\tlocalhost\n",
		"hostname":      hostname + "\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
		"resolv.conf":   "",
	}
	if b, err := os.ReadFile("/etc/ld.so.cache"); err == nil && hostCache {
		files["ld.so.cache"] = string(b)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}
