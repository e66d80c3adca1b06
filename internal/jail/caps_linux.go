package jail

import (
	"fmt"
	"slices"

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

// rootCaps are what root inside a machine with root inside (Spec.RootInside)
// may do, and only to what its own user namespace maps (its block of ids,
// its files): change owners and modes, read and write past the modes, take
// its other ids, signal its processes, bind low ports. No mount, no
// namespace, no device, no raw socket, no ptrace: those stay out of the
// bounding set, and seccomp refuses their calls anyway.
var rootCaps = []uintptr{unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER,
	unix.CAP_FSETID, unix.CAP_KILL, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_NET_BIND_SERVICE}

// capNames names rootCaps as an OCI runtime spec does (gVisor's root
// inside gets the same set).
var capNames = map[uintptr]string{unix.CAP_CHOWN: "CAP_CHOWN", unix.CAP_DAC_OVERRIDE: "CAP_DAC_OVERRIDE",
	unix.CAP_DAC_READ_SEARCH: "CAP_DAC_READ_SEARCH", unix.CAP_FOWNER: "CAP_FOWNER", unix.CAP_FSETID: "CAP_FSETID",
	unix.CAP_KILL: "CAP_KILL", unix.CAP_SETGID: "CAP_SETGID", unix.CAP_SETUID: "CAP_SETUID",
	unix.CAP_NET_BIND_SERVICE: "CAP_NET_BIND_SERVICE"}

// RootInsideCapabilityNames are rootCaps by name.
func RootInsideCapabilityNames() []string {
	names := make([]string, len(rootCaps))
	for i, c := range rootCaps {
		names[i] = capNames[c]
	}
	return names
}

// RootInsideCapabilities is rootCaps as a mask, as /proc/<pid>/status
// shows a capability set.
func RootInsideCapabilities() uint64 {
	var mask uint64
	for _, c := range rootCaps {
		mask |= 1 << c
	}
	return mask
}

// spawnerCaps are what the init of such a machine keeps on its forking
// thread. Permitted: rootCaps, since under no_new_privs an exec never
// gains a capability its caller did not hold, and its own rlimit right.
// Effective: what it needs itself, a process's ids (root or the user) and
// rlimits; a child exec'ed as the user keeps none (no file or ambient
// capability), one exec'ed as root gets rootCaps.
var spawnerCaps = append(slices.Clone(rootCaps), unix.CAP_SYS_RESOURCE)

// spawnerEffective are the capabilities the forking thread uses.
var spawnerEffective = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SYS_RESOURCE}

// rootInsideSecurebits lock what cannot be regained (ambient raises,
// keep-caps) but leave uid 0 its meaning: root's programs get rootCaps.
const rootInsideSecurebits = 1<<5 | // KEEP_CAPS_LOCKED (KEEP_CAPS stays off)
	1<<6 | 1<<7 // NO_CAP_AMBIENT_RAISE

// keepRootCapabilities is dropCapabilities for a machine with root
// inside: the bounding set keeps rootCaps, the thread spawnerCaps
// (spawnerEffective of them effective), nothing ambient or inheritable.
func keepRootCapabilities() error {
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, rootInsideSecurebits, 0, 0, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if slices.Contains(rootCaps, uintptr(c)) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return setCaps(spawnerCaps, spawnerEffective)
}

// setCaps sets the calling thread's permitted and effective sets; the
// inheritable set is emptied.
func setCaps(permitted, effective []uintptr) error {
	var data [2]unix.CapUserData
	for _, c := range permitted {
		data[c/32].Permitted |= 1 << (c % 32)
	}
	for _, c := range effective {
		data[c/32].Effective |= 1 << (c % 32)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
