package jail

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

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
}

// v1Controllers are the hierarchies a v1 sandbox joins.
var v1Controllers = []string{"memory", "pids", "cpuacct"}

var (
	cgroupOnce  sync.Once
	cgroupProbe cgroupHost
)

// probeCgroups finds the cgroup version at run time (statfs of the mount,
// not a guess from the distribution) and whether we may create cgroups.
func probeCgroups() cgroupHost {
	cgroupOnce.Do(func() {
		cgroupProbe = doProbeCgroups()
		reapStaleCgroups(cgroupProbe)
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
// killed first.
func reapStaleCgroups(h cgroupHost) {
	for _, parent := range h.parents {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			pidStr, _, ok := strings.Cut(e.Name(), "-")
			pid, err := strconv.Atoi(pidStr)
			if !e.IsDir() || !ok || err != nil || pid == os.Getpid() {
				continue
			}
			if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
				stale := &cgroup{version: h.version, dirs: map[string]string{"": filepath.Join(parent, e.Name())}}
				_ = (&Cgroup{cg: stale}).KillAll()
				_ = stale.destroy()
			}
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
		if err := prepareV2Parent(dir); err != nil {
			return cgroupHost{reason: "cgroup v2 not delegated to this user: " + err.Error()}
		}
		return cgroupHost{version: 2, parents: map[string]string{"": filepath.Join(dir, "codecage")}}
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
	return cgroupHost{version: 1, parents: parents}
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

// prepareV2Parent makes dir/codecage with the memory, pids and cpu
// controllers enabled. v2 forbids processes in a cgroup whose controllers
// are delegated, so when our own cgroup holds us, we move to a leaf first.
func prepareV2Parent(dir string) error {
	want := "+memory +pids +cpu"
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(want), 0); err != nil {
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		leaf := filepath.Join(dir, "codecage-supervisor")
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte("0"), 0); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(want), 0); err != nil {
			return err
		}
	}
	parent := filepath.Join(dir, "codecage")
	if err := writableDir(parent); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(want), 0)
}

// writableDir creates dir if needed and checks that we may create
// cgroups in it (it may exist already, made by another user).
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}

// cgroup is one sandbox's cgroup (one directory per v1 hierarchy).
type cgroup struct {
	version int
	dirs    map[string]string
}

// initHeadroom bounds the init's own tasks (its Go runtime threads count
// against pids.max) until [cgroup.settlePids] fixes the exact number.
const initHeadroom = 16

func newCgroup(host cgroupHost, id string, lim Limits) (*cgroup, error) {
	cg := &cgroup{version: host.version, dirs: map[string]string{}}
	for c, parent := range host.parents {
		dir := filepath.Join(parent, cgroupName(id))
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.destroy()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		cg.dirs[c] = dir
	}
	mem := strconv.FormatInt(lim.MemoryBytes, 10)
	pids := strconv.Itoa(lim.MaxProcesses + initHeadroom)
	var writes [][3]string
	if host.version == 1 {
		writes = [][3]string{
			{"memory", "memory.limit_in_bytes", mem},
			{"memory", "memory.memsw.limit_in_bytes", mem}, // no escape into swap
			{"pids", "pids.max", pids},
		}
	} else {
		writes = [][3]string{
			{"", "memory.max", mem},
			{"", "memory.swap.max", "0"},
			{"", "pids.max", pids},
		}
	}
	for _, w := range writes {
		p := filepath.Join(cg.dirs[w[0]], w[1])
		if err := os.WriteFile(p, []byte(w[2]), 0); err != nil {
			if os.IsNotExist(err) && strings.Contains(w[1], "swap") {
				continue // kernel without swap accounting: nothing to escape into
			}
			cg.destroy()
			return nil, fmt.Errorf("cgroup %s: %w", w[1], err)
		}
	}
	return cg, nil
}

// addProcess moves pid (and all its threads) into every hierarchy.
func (cg *cgroup) addProcess(pid int) error {
	for _, dir := range cg.dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join cgroup: %w", err)
		}
	}
	return nil
}

// settlePids sets pids.max to the program's budget plus exactly the tasks
// the init holds now. The init calls for it right before it forks the
// program, and holds still afterwards (no GC, one locked thread waiting).
func (cg *cgroup) settlePids(program int) error {
	dir := cg.dirs[""]
	if cg.version == 1 {
		dir = cg.dirs["pids"]
	}
	current := readInt(filepath.Join(dir, "pids.current"))
	if current <= 0 {
		return fmt.Errorf("cgroup: no pids.current in %s", dir)
	}
	return os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(int64(program)+current, 10)), 0)
}

// openV2 returns a descriptor of the v2 cgroup for CLONE_INTO_CGROUP.
func (cg *cgroup) openV2() (*os.File, error) {
	return os.Open(cg.dirs[""])
}

// cpuUsage is the CPU time of every task that ever ran in the cgroup.
func (cg *cgroup) cpuUsage() time.Duration {
	if cg.version == 1 {
		return time.Duration(readInt(filepath.Join(cg.dirs["cpuacct"], "cpuacct.usage")))
	}
	return time.Duration(readKey(filepath.Join(cg.dirs[""], "cpu.stat"), "usage_usec")) * time.Microsecond
}

// memoryPeak is the highest memory use the cgroup saw.
func (cg *cgroup) memoryPeak() int64 {
	if cg.version == 1 {
		return readInt(filepath.Join(cg.dirs["memory"], "memory.max_usage_in_bytes"))
	}
	return readInt(filepath.Join(cg.dirs[""], "memory.peak"))
}

// oomKills counts the processes the OOM killer ended in this cgroup.
func (cg *cgroup) oomKills() int64 {
	if cg.version == 1 {
		return readKey(filepath.Join(cg.dirs["memory"], "memory.oom_control"), "oom_kill")
	}
	return readKey(filepath.Join(cg.dirs[""], "memory.events"), "oom_kill")
}

// destroy removes the cgroup directories. The pid namespace is gone by
// then, but the kernel may take a moment to release the last task.
func (cg *cgroup) destroy() error {
	var firstErr error
	for _, dir := range cg.dirs {
		var err error
		for i := 0; i < 200; i++ {
			err = unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
	}
	return firstErr
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// readKey reads "key value" lines (memory.events, cpu.stat, oom_control).
func readKey(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
