package jail

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// initCaps are the capabilities the init keeps (in its own user namespace
// only) until the sandbox is built: mounts and pivot_root, the loopback
// interface, the nested-namespace sysctl, and dropping the rest.
var initCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_SYS_RESOURCE, unix.CAP_SETPCAP}

// cellUIDCaps let a zygote's cell take its own uid (see Spec.CellUIDs):
// kept by the init and the zygote only when the cells have uids of their
// own, and dropped by each cell with the rest.
var cellUIDCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID}

// capsOf are the capabilities the init and a nested program keep.
func capsOf(cellUIDs int) []uintptr {
	if cellUIDs > 0 {
		return append(append([]uintptr{}, initCaps...), cellUIDCaps...)
	}
	return initCaps
}

// lockedSecurebits make uid 0 inside meaningless and forbid regaining any
// capability through setuid fixups or ambient raises.
// (linux/securebits.h: each flag, then its lock bit.)
const lockedSecurebits = 1<<0 | 1<<1 | // NOROOT
	1<<2 | 1<<3 | // NO_SETUID_FIXUP
	1<<5 | // KEEP_CAPS_LOCKED (KEEP_CAPS stays off)
	1<<6 | 1<<7 // NO_CAP_AMBIENT_RAISE

// dropCapabilities empties every capability set of the calling thread:
// bounding, ambient, inheritable, permitted and effective. Credentials are
// per thread, so the caller must be locked to its OS thread and fork the
// sandboxed program from it.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, lockedSecurebits, 0, 0, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	// Numbers the kernel does not know fail with EINVAL: going to 63 covers
	// any capability a newer kernel adds.
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
