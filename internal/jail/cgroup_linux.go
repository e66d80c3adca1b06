package jail

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is one sandbox's cgroup (one directory per v1 hierarchy). The
// control files it uses more than once stay open for its life, read and
// written at offset 0: opening a cgroup file costs ten times reading it,
// and the CPU budget is read every [CPUTick].
type cgroup struct {
	version int
	dirs    map[string]string
	key     cellKey // the limits a cell's cgroup was made with
	// noCPU: the host has no cpu controller (no bandwidth limit to set);
	// cpuInCpuacct: the v1 cpu files are in the cpuacct directory.
	noCPU, cpuInCpuacct bool

	mu     sync.RWMutex // held for reading while a descriptor is in use
	closed bool         // the descriptors are closed (destroy)
	fds    [numCgFiles]atomic.Int32

	// What the counters that a recycled cgroup cannot reset read when it
	// was reset for its next cell (see [cgroup.reset]).
	cpuBase time.Duration
	oomBase int64
	// dirty is set when a process may have joined only some hierarchies:
	// such a cgroup is never reused.
	dirty atomic.Bool
	// frozen is set before the cgroup is frozen and cleared once it is
	// thawed: a kill meanwhile thaws it (see [cgroup.thawAfterKill]).
	frozen atomic.Bool
}

// cgFile names a control file of a sandbox's cgroup.
type cgFile int

const (
	cgCPU          cgFile = iota // CPU time: cpuacct.usage (v1), cpu.stat (v2)
	cgPeak                       // peak memory: memory.max_usage_in_bytes, memory.peak
	cgOOM                        // OOM kills: memory.oom_control, memory.events
	cgMemory                     // memory now: memory.usage_in_bytes, memory.current
	cgPidsCurrent                // pids.current
	cgPidsMax                    // pids.max
	cgKill                       // cgroup.kill (v2 only)
	cgProcs                      // cgroup.procs (v1: the memory hierarchy's)
	cgProcsPids                  // v1: the pids hierarchy's cgroup.procs
	cgProcsCPU                   // v1: the cpuacct hierarchy's cgroup.procs
	cgCPUMax                     // CPU bandwidth: cpu.cfs_quota_us (v1), cpu.max (v2)
	cgProcsCPUMax                // v1: the cpu hierarchy's cgroup.procs, when it is not cpuacct's
	cgFreeze                     // freezer.state (v1), cgroup.freeze (v2)
	cgEvents                     // cgroup.events (v2 only): "frozen 1" once frozen
	cgProcsFreezer               // v1: the freezer hierarchy's cgroup.procs
	cgMemStat                    // memory.stat: the page cache in the memory now
	numCgFiles
)

// cgFileSpec is where a control file is (its hierarchy, "" on v2) and how
// it is opened.
type cgFileSpec struct {
	ctrl, name string
	mode       int
}

// cgFiles are the control files by cgroup version.
var cgFiles = [3][numCgFiles]cgFileSpec{
	1: {
		cgCPU:         {"cpuacct", "cpuacct.usage", unix.O_RDWR},
		cgPeak:        {"memory", "memory.max_usage_in_bytes", unix.O_RDWR},
		cgOOM:         {"memory", "memory.oom_control", unix.O_RDONLY},
		cgMemory:      {"memory", "memory.usage_in_bytes", unix.O_RDONLY},
		cgPidsCurrent: {"pids", "pids.current", unix.O_RDONLY},
		cgPidsMax:     {"pids", "pids.max", unix.O_RDWR},
		cgProcs:       {"memory", "cgroup.procs", unix.O_WRONLY},
		cgProcsPids:   {"pids", "cgroup.procs", unix.O_WRONLY},
		cgProcsCPU:    {"cpuacct", "cgroup.procs", unix.O_WRONLY},
		cgCPUMax:      {"cpu", "cpu.cfs_quota_us", unix.O_WRONLY},
		cgProcsCPUMax: {"cpu", "cgroup.procs", unix.O_WRONLY},
		// Read and written: reading it is how v1 finishes FREEZING.
		cgFreeze:       {"freezer", "freezer.state", unix.O_RDWR},
		cgProcsFreezer: {"freezer", "cgroup.procs", unix.O_WRONLY},
		cgMemStat:      {"memory", "memory.stat", unix.O_RDONLY},
	},
	2: {
		cgCPU:         {"", "cpu.stat", unix.O_RDONLY},
		cgPeak:        {"", "memory.peak", unix.O_RDWR}, // writable (a reset) from Linux 6.12
		cgOOM:         {"", "memory.events", unix.O_RDONLY},
		cgMemory:      {"", "memory.current", unix.O_RDONLY},
		cgPidsCurrent: {"", "pids.current", unix.O_RDONLY},
		cgPidsMax:     {"", "pids.max", unix.O_RDWR},
		cgKill:        {"", "cgroup.kill", unix.O_WRONLY},
		cgProcs:       {"", "cgroup.procs", unix.O_RDWR},
		cgCPUMax:      {"", "cpu.max", unix.O_WRONLY},
		cgFreeze:      {"", "cgroup.freeze", unix.O_RDWR},
		cgEvents:      {"", "cgroup.events", unix.O_RDONLY},
		cgMemStat:     {"", "memory.stat", unix.O_RDONLY},
	},
}

// initHeadroom bounds the init's own tasks (its Go runtime threads count
// against pids.max) until [cgroup.settlePids] fixes the exact number.
const initHeadroom = 16

// newCgroup creates a sandbox's cgroup. With freezable, on v1, it is in
// the freezer hierarchy too where the host has one (v2 can freeze any
// cgroup): a cell, which is never paused, does without that hierarchy,
// whose join would cost each cell's start.
func newCgroup(host cgroupHost, id string, lim Limits, freezable bool) (*cgroup, error) {
	cg := &cgroup{version: host.version, dirs: map[string]string{}, noCPU: host.noCPU != "", cpuInCpuacct: host.cpuInCpuacct}
	parents := host.parents
	if freezable && host.freezerParent != "" {
		parents = maps.Clone(parents)
		parents["freezer"] = host.freezerParent
	}
	for c, parent := range parents {
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
		}
	} else {
		writes = [][3]string{
			{"", "memory.max", mem},
			{"", "memory.swap.max", "0"},
		}
	}
	for _, w := range writes {
		p := filepath.Join(cg.dirs[w[0]], w[1])
		if err := writeControl(p, w[2]); err != nil {
			if errors.Is(err, unix.ENOENT) && strings.Contains(w[1], "swap") {
				continue // kernel without swap accounting: nothing to escape into
			}
			cg.destroy()
			return nil, fmt.Errorf("cgroup %s: %w", w[1], err)
		}
	}
	if err := cg.write(cgPidsMax, pids); err != nil {
		cg.destroy()
		return nil, fmt.Errorf("cgroup pids.max: %w", err)
	}
	if err := cg.setCPU(lim.CPUCores); err != nil {
		cg.destroy()
		return nil, err
	}
	return cg, nil
}

// cpuPeriod is the CFS bandwidth period, in microseconds: the kernel's
// default, which v1 gives every new cgroup.
const cpuPeriod = 100_000

// cpuQuota is the quota per period, in microseconds, of a bandwidth of
// cores: at least the kernel's minimum (1 ms), at most 1024 cores.
func cpuQuota(cores float64) int64 {
	q := int64(cores*cpuPeriod + 0.5)
	return min(max(q, 1000), 1024*cpuPeriod)
}

// setCPU limits the cgroup's tasks together to cores of CPU bandwidth
// (CFS quota per period); nothing when the host has no cpu controller (its
// isolation warnings say so).
func (cg *cgroup) setCPU(cores float64) error {
	if cg.noCPU {
		return nil
	}
	q := strconv.FormatInt(cpuQuota(cores), 10)
	if cg.version == 2 {
		q += " " + strconv.Itoa(cpuPeriod)
	}
	if err := cg.write(cgCPUMax, q); err != nil {
		return fmt.Errorf("cgroup %s: %w", cgFiles[cg.version][cgCPUMax].name, err)
	}
	return nil
}

// writeControl writes s to a control file: open, write, close, around the
// runtime's poller (a cgroup file is pollable, and registering it costs).
func writeControl(path, s string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = retryEINTR(func() error { _, err := unix.Write(fd, []byte(s)); return err })
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// fd returns the descriptor of control file f, opened on first use, or -1
// when it cannot be opened (absent on this kernel). cg.mu is held for
// reading. fds holds the descriptor plus one, 0 before the first use, and
// -1 for an absent file.
func (cg *cgroup) fd(f cgFile) int {
	if v := cg.fds[f].Load(); v != 0 {
		return max(int(v)-1, -1)
	}
	spec := cgFiles[cg.version][f]
	ctrl := spec.ctrl
	if ctrl == "cpu" && cg.cpuInCpuacct {
		ctrl = "cpuacct"
	}
	dir, ok := cg.dirs[ctrl]
	if spec.name == "" || !ok {
		cg.fds[f].Store(-1)
		return -1
	}
	path := filepath.Join(dir, spec.name)
	fd, err := unix.Open(path, spec.mode|unix.O_CLOEXEC, 0)
	if err != nil && spec.mode == unix.O_RDWR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0) // not writable on this kernel
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			cg.fds[f].CompareAndSwap(0, -1)
		}
		return -1
	}
	if !cg.fds[f].CompareAndSwap(0, int32(fd)+1) {
		unix.Close(fd) // another reader opened it meanwhile
		return max(int(cg.fds[f].Load())-1, -1)
	}
	return fd
}

// read reads control file f into buf from its start; 0 when it cannot.
func (cg *cgroup) read(f cgFile, buf []byte) int {
	cg.mu.RLock()
	defer cg.mu.RUnlock()
	if cg.closed {
		return 0
	}
	fd := cg.fd(f)
	if fd < 0 {
		return 0
	}
	n, err := unix.Pread(fd, buf, 0)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// write writes s to control file f.
func (cg *cgroup) write(f cgFile, s string) error {
	cg.mu.RLock()
	defer cg.mu.RUnlock()
	if cg.closed {
		return unix.EBADF
	}
	fd := cg.fd(f)
	if fd < 0 {
		return fmt.Errorf("cgroup: no %s", cgFiles[cg.version][f].name)
	}
	return retryEINTR(func() error { _, err := unix.Pwrite(fd, []byte(s), 0); return err })
}

// retryEINTR runs a control file's write again while a signal interrupts
// it: setting a memory limit below what the group uses makes the kernel
// reclaim, which a signal cuts short (the Go runtime's preemption signal
// is one), and the write then fails with EINTR having changed nothing.
func retryEINTR(write func() error) error {
	for {
		if err := write(); err != unix.EINTR {
			return err
		}
	}
}

// readInt reads a control file that holds one number; 0 when it cannot.
func (cg *cgroup) readInt(f cgFile) int64 {
	var buf [64]byte
	n := cg.read(f, buf[:])
	v, _ := strconv.ParseInt(string(bytes.TrimSpace(buf[:n])), 10, 64)
	return v
}

// readKey reads the value of key in a control file of "key value" lines
// (memory.events, cpu.stat, memory.oom_control); 0 when it cannot.
func (cg *cgroup) readKey(f cgFile, key string) int64 {
	var buf [1024]byte
	return keyIn(buf[:cg.read(f, buf[:])], key)
}

// keyIn is the value of key in b, lines of "key value"; 0 without it.
func keyIn(b []byte, key string) int64 {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if k, v, ok := bytes.Cut(line, []byte{' '}); ok && string(k) == key {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}

// addProcess moves pid (and all its threads) into every hierarchy.
func (cg *cgroup) addProcess(pid int) error {
	files := []cgFile{cgProcs}
	if cg.version == 1 {
		files = []cgFile{cgProcs, cgProcsPids, cgProcsCPU}
		if _, ok := cg.dirs["cpu"]; ok {
			files = append(files, cgProcsCPUMax)
		}
		if _, ok := cg.dirs["freezer"]; ok {
			files = append(files, cgProcsFreezer)
		}
	}
	for i, f := range files {
		if err := cg.write(f, strconv.Itoa(pid)); err != nil {
			if i > 0 {
				cg.dirty.Store(true) // in some hierarchies only
			}
			return fmt.Errorf("join cgroup: %w", err)
		}
	}
	return nil
}

// settlePids sets pids.max to the program's budget plus exactly the tasks
// the init holds now. The init calls for it right before it forks the
// program, and holds still afterwards (no GC, one locked thread waiting).
func (cg *cgroup) settlePids(program int) error {
	current := cg.readInt(cgPidsCurrent)
	if current <= 0 {
		return fmt.Errorf("cgroup: no pids.current in %s", cg.dirs[cgFiles[cg.version][cgPidsCurrent].ctrl])
	}
	return cg.write(cgPidsMax, strconv.FormatInt(int64(program)+current, 10))
}

// openV2 returns a descriptor of the v2 cgroup for CLONE_INTO_CGROUP.
func (cg *cgroup) openV2() (*os.File, error) {
	return os.Open(cg.dirs[""])
}

// cpuUsage is the CPU time of every task that ran in the cgroup.
func (cg *cgroup) cpuUsage() time.Duration {
	if cg.version == 1 {
		return time.Duration(cg.readInt(cgCPU)) - cg.cpuBase
	}
	return time.Duration(cg.readKey(cgCPU, "usage_usec"))*time.Microsecond - cg.cpuBase
}

// memoryPeak is the highest memory use the cgroup saw.
func (cg *cgroup) memoryPeak() int64 { return cg.readInt(cgPeak) }

// oomKills counts the processes the OOM killer ended in this cgroup.
func (cg *cgroup) oomKills() int64 { return cg.readKey(cgOOM, "oom_kill") - cg.oomBase }

// procs lists the processes in the cgroup. On v1 the list is read through
// a fresh descriptor each time: v1 caches a listing per open file (for a
// second after its last read), and a kept descriptor would show dead
// processes and miss new ones.
func (cg *cgroup) procs() ([]int, error) {
	dir, ok := cg.dirs["pids"]
	if !ok {
		dir = cg.dirs[""] // v2, or one stale v1 directory (reapStaleCgroups)
	}
	return readProcs(filepath.Join(dir, "cgroup.procs"))
}

// readProcs reads the pids listed in a cgroup.procs file.
func readProcs(path string) ([]int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("jail: read %s: %w", path, err)
	}
	defer unix.Close(fd)
	var buf [4096]byte
	var pids []int
	pid, digits := 0, false
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jail: read %s: %w", path, err)
		}
		for _, c := range buf[:n] {
			if c >= '0' && c <= '9' {
				pid, digits = pid*10+int(c-'0'), true
			} else if digits {
				pids = append(pids, pid)
				pid, digits = 0, false
			}
		}
		if n == 0 {
			if digits {
				pids = append(pids, pid)
			}
			return pids, nil
		}
	}
}

// kill sends SIGKILL to every process in the cgroup: through cgroup.kill
// on v2 where the kernel has it, else to each process listed. With wait it
// repeats until none is left (a process may fork while the list is read),
// or gives up after two seconds. A frozen cgroup is thawed once its tasks
// have their SIGKILL: v1 delivers no signal to a frozen task, and a task
// thawed with SIGKILL pending dies before it runs any code of its own.
func (cg *cgroup) kill(wait bool) error {
	if cg.version == 2 && cg.write(cgKill, "1") == nil && !wait {
		cg.thawAfterKill()
		return nil
	}
	for i := 0; ; i++ {
		pids, err := cg.procs()
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if i == 0 {
			cg.thawAfterKill()
		}
		if !wait {
			return nil
		}
		if i == 400 {
			return errors.New("jail: processes of the cgroup survive SIGKILL")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// destroy closes the control files and removes the cgroup directories.
// The pid namespace is gone by then, but the kernel may take a moment to
// release the last task.
func (cg *cgroup) destroy() error {
	cg.mu.Lock()
	if !cg.closed {
		cg.closed = true
		for i := range cg.fds {
			if v := cg.fds[i].Swap(0); v > 0 {
				unix.Close(int(v) - 1)
			}
		}
	}
	cg.mu.Unlock()
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
