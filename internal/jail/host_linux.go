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

// Layers is what every sandbox on this host gets, warnings included.
func (h Host) Layers() Layers {
	l := Layers{Rootless: h.Rootless, LandlockABI: h.LandlockABI, Seccomp: h.Seccomp == nil, Cgroup: "none", Warnings: []string{}}
	switch h.Cgroup.version {
	case 1:
		l.Cgroup = "v1"
	case 2:
		l.Cgroup = "v2"
	default:
		l.Warnings = append(l.Warnings, "no cgroup ("+h.Cgroup.reason+"): memory is limited by RLIMIT_AS, processes by RLIMIT_NPROC, CPU time per process only")
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
	cmd := &exec.Cmd{Path: "/bin/true", Args: []string{"true"}, SysProcAttr: userNSAttr(os.Geteuid(), os.Getegid())}
	return cmd.Run()
}
