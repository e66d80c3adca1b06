package jail

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Host describes the isolation layers this machine offers to this process.
type Host struct {
	Rootless       bool
	UserNamespaces error // nil when a user namespace can be created
	Seccomp        error // nil when seccomp filters are available
	LandlockABI    int
	Cgroup         cgroupHost
}

var (
	hostOnce  sync.Once
	hostProbe Host
)

// ProbeHost inspects the kernel once per process.
func ProbeHost() Host {
	hostOnce.Do(func() {
		hostProbe = Host{
			Rootless:       os.Geteuid() != 0,
			UserNamespaces: probeUserNS(),
			Seccomp:        probeSeccomp(),
			LandlockABI:    landlockABI(),
			Cgroup:         probeCgroups(),
		}
	})
	return hostProbe
}

// CgroupVersion is 1 or 2, or 0 when this process cannot create cgroups.
func (h Host) CgroupVersion() int { return h.Cgroup.version }

// CgroupReason says why no cgroup can be used (empty when one can).
func (h Host) CgroupReason() string { return h.Cgroup.reason }

// CPUBandwidth is nil when sandboxes get a CPU bandwidth limit
// (Limits.CPUCores), else why they do not.
func (h Host) CPUBandwidth() error {
	switch {
	case h.Cgroup.version == 0:
		return errors.New("no cgroup: " + h.Cgroup.reason)
	case h.Cgroup.noCPU != "":
		return errors.New(h.Cgroup.noCPU)
	}
	return nil
}

// PauseBy says how whole sandboxes are paused in memory ([Sandbox.Pause]):
// their cgroup's freezer, or where there is none, stopping each process.
func (h Host) PauseBy() string {
	switch {
	case h.Cgroup.version == 0:
		return "SIGSTOP and SIGCONT to each process (no cgroup: " + h.Cgroup.reason + ")"
	case h.Cgroup.version == 1 && h.Cgroup.freezerParent == "":
		return "SIGSTOP and SIGCONT to each process (" + h.Cgroup.noFreezer + ")"
	}
	return "the cgroup freezer"
}

// Layers is what every sandbox on this host gets, warnings included.
func (h Host) Layers() Layers {
	l := Layers{Rootless: h.Rootless, LandlockABI: h.LandlockABI, Seccomp: h.Seccomp == nil, Cgroup: "none", Warnings: []string{}}
	switch h.Cgroup.version {
	case 1:
		l.Cgroup = "v1"
	case 2:
		l.Cgroup = "v2"
	default:
		l.Warnings = append(l.Warnings, "no cgroup ("+h.Cgroup.reason+"): memory is limited by RLIMIT_AS, processes by RLIMIT_NPROC, CPU time per process only, CPU bandwidth not at all")
	}
	if h.Cgroup.version != 0 && h.Cgroup.noCPU != "" {
		l.Warnings = append(l.Warnings, "no CPU bandwidth limit ("+h.Cgroup.noCPU+"): a sandbox may use every core; its CPU time is still bounded")
	}
	if h.LandlockABI == 0 {
		l.Warnings = append(l.Warnings, "Landlock unavailable: filesystem access is confined by the mount namespace alone")
	}
	return l
}

// Usable returns an error wrapping [ErrUnsupported] when a required layer
// (user namespaces, seccomp) is missing.
func (h Host) Usable() error {
	if h.UserNamespaces != nil {
		return fmt.Errorf("%w: user namespaces: %v", ErrUnsupported, h.UserNamespaces)
	}
	if h.Seccomp != nil {
		return fmt.Errorf("%w: seccomp: %v", ErrUnsupported, h.Seccomp)
	}
	return nil
}

func probeSeccomp() error {
	// PR_GET_SECCOMP answers EINVAL on kernels built without seccomp.
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_GET_SECCOMP): %w", err)
	}
	b, err := os.ReadFile("/proc/self/status")
	if err == nil && !strings.Contains(string(b), "Seccomp_filters:") && !strings.Contains(string(b), "Seccomp:") {
		return errors.New("kernel reports no seccomp support")
	}
	return nil
}

// probeUserNS starts /bin/true in a new user namespace, the way a sandbox
// would start; sysctls differ between distributions, so only trying tells.
func probeUserNS() error {
	cmd := &exec.Cmd{Path: "/bin/true", Args: []string{"true"}, SysProcAttr: userNSAttr(os.Geteuid(), os.Getegid(), 1)}
	return cmd.Run()
}

// In a container with a user namespace of its own (Kubernetes hostUsers:
// false, Docker's userns-remap) only the ids the container maps exist, and a
// sandbox's uid_map may name no other: move the sandbox uids inside them.
// On a host (the whole id space mapped) nothing changes.
func init() {
	HostUIDBase, HostUIDCount = fitUIDRange(HostUIDBase, HostUIDCount,
		readIDMap("/proc/self/uid_map"), readIDMap("/proc/self/gid_map"))
}

// idExtent is [lo, hi) of the ids this process's user namespace maps.
type idExtent struct{ lo, hi int64 }

func readIDMap(path string) []idExtent {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []idExtent
	for _, l := range strings.Split(string(b), "\n") {
		var inside, outside, count int64
		if _, err := fmt.Sscan(l, &inside, &outside, &count); err == nil {
			out = append(out, idExtent{inside, inside + count})
		}
	}
	return out
}

// fitUIDRange keeps [base, base+count) when both maps cover it; otherwise it
// picks the upper part of the largest extent both maps cover, above the
// accounts an image has (from 32768) and below nobody (65534) and the top
// id. Unreadable maps (not Linux, no /proc) leave the range as it is.
func fitUIDRange(base, count int, uids, gids []idExtent) (int, int) {
	covers := func(m []idExtent, lo, hi int64) bool {
		for _, e := range m {
			if e.lo <= lo && hi <= e.hi {
				return true
			}
		}
		return false
	}
	lo, hi := int64(base), int64(base)+int64(count)
	if len(uids) == 0 || len(gids) == 0 || (covers(uids, lo, hi) && covers(gids, lo, hi)) {
		return base, count
	}
	var best idExtent
	for _, u := range uids {
		for _, g := range gids {
			e := idExtent{max(u.lo, g.lo), min(u.hi, g.hi)}
			if e.hi-e.lo > best.hi-best.lo {
				best = e
			}
		}
	}
	start := max(best.lo, 1<<15)
	end := best.hi
	if end > 65534 && end <= 65536 {
		end = 65534 // nobody and the top id
	}
	if end-start < 256 {
		return base, count // too few: the sandbox fails as it would anyway
	}
	return int(start), int(min(end-start, int64(count)))
}

// OwnIDMap describes this process's user namespace as the kernel maps it:
// onHost is true when it runs on the host's own ids (the initial
// namespace, or a container without a user namespace: uid_map "0 0
// 4294967295"); otherwise desc says which ids map where ("ids 0-65535 onto
// host ids 2147483648-2147549183"), as in a pod with hostUsers: false.
func OwnIDMap() (onHost bool, desc string) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true, ""
	}
	var parts []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var inside, outside, count uint64
		if _, err := fmt.Sscan(l, &inside, &outside, &count); err != nil {
			continue
		}
		if inside == 0 && outside == 0 && count == 1<<32-1 {
			return true, ""
		}
		parts = append(parts, fmt.Sprintf("ids %d-%d onto host ids %d-%d", inside, inside+count-1, outside, outside+count-1))
	}
	return false, strings.Join(parts, ", ")
}
