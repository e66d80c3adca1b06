package gvisor

import (
	_ "embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/codecage/codecage/internal/jail"
)

// identity is who a sandbox's program is, on the host and in gVisor's
// kernel. Without root inside they are one uid: the sandbox has no user
// namespace of its own, and the gofer writes the program's files as the
// uid its kernel names. A machine with root inside (jail.Spec.RootInside)
// has a user namespace mapping its ids 0 to MachineIDs-1 onto its block
// of host ids, as a native machine's does: the Sentry and the gofer run
// in it, so root of gVisor's kernel is the block's first id to the host,
// never the host's root, and its user is SandboxUID inside.
type identity struct {
	host  int // the user's uid (and gid) on the host
	first int // the block's first host id, with root inside; else 0
}

// identityOf is spec's program's identity as host uid.
func identityOf(spec jail.Spec, host int) identity {
	id := identity{host: host}
	if spec.RootInside && spec.Machine && spec.HostUID == host && os.Geteuid() == 0 &&
		host-jail.SandboxUID >= jail.HostUIDBase && jail.InUIDSpan(host) {
		id.first = host - jail.SandboxUID
	}
	return id
}

// rootInside reports whether the sandbox maps root and its block.
func (id identity) rootInside() bool { return id.first != 0 }

// user is the program's uid in gVisor's kernel.
func (id identity) user() int {
	if id.rootInside() {
		return id.host - id.first
	}
	return id.host
}

// mappings are the user namespace's id maps (none without root inside).
func (id identity) mappings() []ociIDMapping {
	if !id.rootInside() {
		return nil
	}
	return []ociIDMapping{{ContainerID: 0, HostID: uint32(id.first), Size: jail.MachineIDs}}
}

// reach lets the sandbox's gofer, in the user namespace as the block's
// first id, look up paths through the bundle's directory dir: search, not
// listing (o+x), added to dir, the state directory above it and
// codecage's own run directory; any other directory on the way that
// others may not search is refused, naming it. Without root inside the
// gofer is the host's root and nothing changes.
func (id identity) reach(dir string) error {
	if !id.rootInside() {
		return nil
	}
	ours := map[string]bool{dir: true, filepath.Dir(dir): true, jail.NestedDir: true}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if mode := fi.Mode().Perm(); mode&0o001 == 0 {
			if !ours[d] {
				return fmt.Errorf("root inside a gVisor machine: its gofer runs as the machine's own ids and cannot pass %s (mode %o): let others search it (chmod o+x) or move the state directory", d, mode)
			}
			if err := os.Chmod(d, mode|0o011); err != nil {
				return err
			}
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// rootsOwnTree gives a root-inside machine's root what a native one's
// has, root inside's (the block's first id) as a Debian system's are
// root's: on the host's system, /var with the package managers' state
// (the host's status, which describes the /usr it sees; an environment's
// root brings its own /var, bound over it), a sticky /var/tmp, and every
// entry the bundle made (/etc's files, the links, /opt). What the host's
// root owns shows as nobody inside (unmapped); runsc overlays all of it
// with memory, so root inside may change it there.
func rootsOwnTree(root string, first int, hostSystem bool) error {
	if hostSystem {
		if err := jail.PlacePackageState(root); err != nil {
			return fmt.Errorf("gvisor: package state: %w", err)
		}
	}
	tmp := filepath.Join(root, "var", "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil // the user's, as a native machine's /
		}
		return os.Lchown(p, first, first)
	})
}

// sudod is the sudo server the harness's init runs in a machine with
// root inside: see sudod.py.
//
//go:embed sudod.py
var sudod string

// sudoEnv is env with what the harness's init needs to serve sudo and to
// run the harness as uid.
func sudoEnv(env []string, uid int) []string {
	return append(slices.Clip(env), "CODECAGE_SUDO="+strconv.Itoa(uid)+":"+jail.SudoSocket, "CODECAGE_SUDO_SERVER="+sudod)
}

// placeSudo writes the machine's sudo (jail's script, run by python) and
// makes its server's socket directory, in the bundle's root.
func placeSudo(root, python string) error {
	dst := filepath.Join(root, jail.SudoPath)
	for _, d := range []string{filepath.Dir(dst), filepath.Dir(filepath.Join(root, jail.SudoSocket))} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("gvisor: sudo: %w", err)
		}
	}
	return os.WriteFile(dst, []byte(jail.SudoScript(python)), 0o755)
}
