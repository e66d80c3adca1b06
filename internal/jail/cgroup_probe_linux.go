package jail

import (
	"bufio"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroupHost describes where this process may create sandbox cgroups.
type cgroupHost struct {
	version int // 1, 2, or 0 when none can be used
	// parents maps each controller (v1) or "" (v2) to the directory under
	// which sandbox cgroups are created.
	parents map[string]string
	reason  string // why version is 0
	// noCPU says why sandboxes get no CPU bandwidth limit (no cpu
	// controller); empty when they do.
	noCPU string
	// cpuInCpuacct: on v1 the cpu and cpuacct controllers share one
	// hierarchy (cpu,cpuacct), so the cpu files are in the cpuacct directory.
	cpuInCpuacct bool
	// freezerParent (v1) is where sandbox cgroups that can be paused get
	// their freezer directory; empty when there is none, and noFreezer
	// then says why. v2 freezes any cgroup.
	freezerParent, noFreezer string
}

// v1Controllers are the hierarchies a v1 sandbox joins.
var v1Controllers = []string{"memory", "pids", "cpuacct"}

var (
	cgroupOnce  sync.Once
	cgroupProbe cgroupHost
)

// probeCgroups finds the cgroup version at run time (statfs of the mount,
// not a guess from the distribution) and whether we may create cgroups.
// Before this process makes any, it removes those its dead predecessors
// left, and takes its supervisor lock.
func probeCgroups() cgroupHost {
	cgroupOnce.Do(func() {
		cgroupProbe = doProbeCgroups()
		if cgroupProbe.version != 0 {
			reapStaleCgroups(cgroupProbe, true)
			holdSupervisorLock()
		}
	})
	return cgroupProbe
}

// cgroupName names a sandbox's cgroup after the supervisor's pid, so a
// later supervisor can tell whose it is.
func cgroupName(id string) string {
	return strconv.Itoa(os.Getpid()) + "-" + id
}

// reapStaleCgroups removes the cgroups of supervisors that died without
// tearing down. A jail's sandboxes died with them (Pdeathsig on the init);
// what else is left (gVisor's Sentry and Gofer, which runsc starts) is
// killed first. A cgroup is stale when the pid it is named after runs no
// more, or runs a process that is not the codecage that made it (its
// supervisor lock is free: the pid was given to another process), or is
// this process's own when it has made none yet (ownToo: a predecessor
// with the same pid, as in a restarted container). A live codecage's
// cgroups, and those whose maker cannot be told (an older codecage
// without the lock), are left alone.
func reapStaleCgroups(h cgroupHost, ownToo bool) {
	var parents []string
	if h.freezerParent != "" {
		// First: a frozen sandbox's tasks die only once thawed.
		parents = append(parents, h.freezerParent)
	}
	parents = append(parents, slices.Collect(maps.Values(h.parents))...)
	for _, parent := range parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			pidStr, _, ok := strings.Cut(e.Name(), "-")
			pid, err := strconv.Atoi(pidStr)
			if !e.IsDir() || !ok || err != nil || pid <= 0 || !staleSupervisor(pid, ownToo) {
				continue
			}
			dir := filepath.Join(parent, e.Name())
			stale := &cgroup{version: h.version, dirs: map[string]string{"": dir}}
			if parent == h.freezerParent {
				stale.dirs["freezer"] = dir
			}
			stale.frozen.Store(true) // it may be: the kill thaws it
			_ = stale.kill(true)
			_ = stale.destroy()
		}
	}
	removeDeadSupervisorLocks()
}

// staleSupervisor reports whether the cgroups named after pid were made
// by a process that is dead.
func staleSupervisor(pid int, ownToo bool) bool {
	if pid == os.Getpid() {
		return ownToo
	}
	if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
		return true
	}
	return supervisorOf(pid) == supervisorDead
}

// removeDeadSupervisorLocks removes the lock files of pids that run no
// more, so that they do not pile up.
func removeDeadSupervisorLocks() {
	entries, _ := os.ReadDir(supervisorDir())
	for _, e := range entries {
		pidStr, ok := strings.CutSuffix(e.Name(), ".lock")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			removeDeadSupervisorLock(pid)
		}
	}
}

func doProbeCgroups() cgroupHost {
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil {
		return cgroupHost{reason: "no cgroup filesystem at " + cgroupRoot}
	}
	own, err := ownCgroups()
	if err != nil {
		return cgroupHost{reason: err.Error()}
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		dir := filepath.Join(cgroupRoot, own[""])
		noCPU, err := prepareV2Parent(dir)
		if err != nil {
			return cgroupHost{reason: "cgroup v2 not delegated to this process: " + err.Error()}
		}
		return cgroupHost{version: 2, parents: map[string]string{"": filepath.Join(dir, "codecage")}, noCPU: noCPU}
	}
	parents := map[string]string{}
	for _, c := range v1Controllers {
		p, ok := own[c]
		if !ok {
			return cgroupHost{reason: "cgroup v1 controller " + c + " is not mounted"}
		}
		dir := filepath.Join(cgroupRoot, c, p, "codecage")
		if err := writableDir(dir); err != nil {
			return cgroupHost{reason: "cgroup v1 " + c + " is not delegated to this user: " + err.Error()}
		}
		parents[c] = dir
	}
	h := cgroupHost{version: 1, parents: parents}
	h.noCPU, h.cpuInCpuacct = probeV1CPU(own, parents)
	h.freezerParent, h.noFreezer = probeV1Freezer(own)
	return h
}

// probeV1Freezer finds the v1 freezer hierarchy, which pausing a sandbox
// needs: the directory for sandbox cgroups, or why there is none.
func probeV1Freezer(own map[string]string) (parent, noFreezer string) {
	p, ok := own["freezer"]
	if !ok {
		return "", "cgroup v1 controller freezer is not mounted"
	}
	dir := filepath.Join(cgroupRoot, "freezer", p, "codecage")
	if err := writableDir(dir); err != nil {
		return "", "cgroup v1 freezer is not delegated to this user: " + err.Error()
	}
	return dir, ""
}

// probeV1CPU finds the v1 cpu controller's hierarchy for the CPU bandwidth
// limit: its own (parents["cpu"] is then set), or cpuacct's (shared is
// true: the usual cpu,cpuacct mount). noCPU says why there is none.
func probeV1CPU(own, parents map[string]string) (noCPU string, shared bool) {
	p, ok := own["cpu"]
	if !ok {
		return "cgroup v1 controller cpu is not mounted", false
	}
	dir := filepath.Join(cgroupRoot, "cpu", p, "codecage")
	if err := writableDir(dir); err != nil {
		return "cgroup v1 cpu is not delegated to this user: " + err.Error(), false
	}
	if _, err := os.Stat(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil {
		return "the kernel has no CFS bandwidth control (cpu.cfs_quota_us)", false
	}
	a, errA := os.Stat(dir)
	b, errB := os.Stat(parents["cpuacct"])
	if errA == nil && errB == nil && os.SameFile(a, b) {
		return "", true
	}
	parents["cpu"] = dir
	return "", false
}

// ownCgroups reads /proc/self/cgroup: controller -> path ("" for v2).
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// writableDir creates dir if needed and checks that we may create
// cgroups in it (it may exist already, made by another user).
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}
