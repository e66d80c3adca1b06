package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// prepareV2Parent makes dir/codecage with the memory, pids and cpu
// controllers enabled. The cpu controller may be missing (not delegated):
// noCPU then says so, and sandboxes get no CPU bandwidth limit. memory and
// pids are required. An error names its cause (cgroupCause).
func prepareV2Parent(dir string) (noCPU string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", err
	}
	have := strings.Fields(string(b))
	for _, c := range []string{"memory", "pids"} {
		if !slices.Contains(have, c) {
			return "", fmt.Errorf("controller %s is not delegated to %s (it has %q): the parent cgroup must enable it in cgroup.subtree_control", c, dir, strings.Join(have, " "))
		}
	}
	want := "+memory +pids +cpu"
	if !slices.Contains(have, "cpu") {
		want, noCPU = "+memory +pids", "cgroup v2 controller cpu is not available in "+dir
	}
	if err := enableV2Controllers(dir, want); err != nil {
		return "", err
	}
	parent := filepath.Join(dir, "codecage")
	if err := writableDir(parent); err != nil {
		return "", cgroupCause(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(want), 0); err != nil {
		return "", cgroupCause(err)
	}
	return noCPU, nil
}

// enableV2Controllers enables want ("+memory +pids") for dir's children.
// The kernel refuses (EBUSY) while dir itself holds processes, and in a
// container it does: this process and the runtime's PID 1 (tini), maybe
// more. So all of them move to the leaf dir/codecage-supervisor first.
func enableV2Controllers(dir, want string) error {
	ctl := filepath.Join(dir, "cgroup.subtree_control")
	err := os.WriteFile(ctl, []byte(want), 0)
	if !errors.Is(err, unix.EBUSY) {
		return cgroupCause(err)
	}
	leaf := filepath.Join(dir, "codecage-supervisor")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return cgroupCause(err)
	}
	if err := moveAllProcs(dir, leaf); err != nil {
		return err
	}
	return cgroupCause(os.WriteFile(ctl, []byte(want), 0))
}

// moveAllProcs moves every process in cgroup from into cgroup to. A
// process may fork while they move, so it reads the list again until it
// is empty, a bounded number of times.
func moveAllProcs(from, to string) error {
	dst := filepath.Join(to, "cgroup.procs")
	for range 64 {
		b, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
		if err != nil {
			return cgroupCause(err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			// ESRCH: it exited meanwhile.
			if err := os.WriteFile(dst, []byte(pid), 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("move process %s from %s to %s: %w", pid, from, to, cgroupCause(err))
			}
		}
	}
	return fmt.Errorf("processes kept appearing in %s while moving them to %s", from, to)
}

// cgroupCause says, of an error writing a delegated cgroup, what in the
// container's setup causes it: each has a different fix.
func cgroupCause(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("%w: %s is mounted read-only, as container runtimes do unless told otherwise (containerd 2.1+: a runtime handler with cgroup_writable = true, chosen by the pod's runtimeClassName; GKE: writable cgroups)", err, cgroupRoot)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: the cgroup is mounted writable but not owned by this container's root (runc hands it over only with the systemd cgroup driver, SystemdCgroup = true; with cgroupfs it stays the host's)", err)
	}
	return err
}
