package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

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
	// contained: this process lacks CAP_SYS_ADMIN (a container, a pod with
	// hostUsers: false), so runsc's gofer cannot make its mount namespace
	// in our user namespace: every sandbox gets one of its own (mappings).
	contained bool
}

// identityOf is spec's program's identity as host uid.
func identityOf(spec jail.Spec, host int) identity {
	id := identity{host: host, contained: !hasSysAdmin()}
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

// mappings are the user namespace's id maps: root inside maps the block;
// a contained sandbox maps its program's uid as it is and root onto our
// own (runsc starts its gofer as that root: the same uid as today's gofer
// without a user namespace, this process's); otherwise none.
func (id identity) mappings() []ociIDMapping {
	switch {
	case id.rootInside():
		return []ociIDMapping{{ContainerID: 0, HostID: uint32(id.first), Size: jail.MachineIDs}}
	case id.contained && id.host != os.Geteuid():
		self := uint32(os.Geteuid())
		return []ociIDMapping{{ContainerID: 0, HostID: self, Size: 1}, {ContainerID: uint32(id.host), HostID: uint32(id.host), Size: 1}}
	}
	return nil
}

// ownUserNS reports whether the sandbox has a user namespace of its own.
func (id identity) ownUserNS() bool { return len(id.mappings()) > 0 }

// hasSysAdmin reports, once, whether this process holds CAP_SYS_ADMIN.
var hasSysAdmin = sync.OnceValue(func() bool { return jail.HasCapability(jail.CapSysAdmin) })

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
