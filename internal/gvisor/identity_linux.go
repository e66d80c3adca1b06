package gvisor

import (
	"fmt"
	"os"
	"path/filepath"

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
