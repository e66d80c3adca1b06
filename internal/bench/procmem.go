package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/policy"
)

// SandboxProcess is one host process inside a sandbox.
type SandboxProcess struct {
	PID int `json:"pid"`
	UID int `json:"uid"`
	// Name is the Name: line of /proc/<pid>/status.
	Name string `json:"name"`
	// PidNS is the process's pid namespace: every sandbox has its own, a
	// forked cell one nested in its zygote's.
	PidNS string `json:"pid_ns"`
	// Class is the pool class the sandbox was started for: data_science
	// when its interpreter preloads numpy, basic otherwise.
	Class string `json:"class"`
	// RSS and PSS are in bytes; PSS splits shared pages among the processes
	// that map them (0 when smaps_rollup cannot be read).
	RSS int64 `json:"rss_bytes"`
	PSS int64 `json:"pss_bytes"`
	// MemCgroup is the sandbox's memory cgroup directory, "" if none.
	MemCgroup string `json:"mem_cgroup,omitempty"`
}

// Sandbox identifies the sandbox of the process: its own cgroup, which
// every sandbox (and every cell forked by a zygote) has, or else its pid
// namespace.
func (p SandboxProcess) Sandbox() string {
	if p.MemCgroup != "" {
		return p.MemCgroup
	}
	return p.PidNS
}

// SandboxProcesses lists the host processes that belong to sandboxes
// started by this process: descendants of it that run as a sandbox uid
// (root mode gives each sandbox a uid of its own from the fleet's uid span) or in
// another pid namespace (rootless mode). Sandboxes of other codecage
// processes on the host are left out.
func SandboxProcesses() []SandboxProcess {
	self := os.Getpid()
	selfNS, _ := os.Readlink("/proc/self/ns/pid")
	type proc struct {
		ppid, uid int
		name      string
	}
	procs := map[int]proc{}
	for _, p := range leftovers.HostProcesses() {
		procs[p.PID] = proc{ppid: p.PPID, uid: p.UID(), name: p.Name}
	}
	descends := func(pid int) bool {
		for range 64 { // pid trees are shallow; a bound guards against cycles of reused pids
			p, ok := procs[pid]
			if !ok || p.ppid <= 0 {
				return false
			}
			if p.ppid == self {
				return true
			}
			pid = p.ppid
		}
		return false
	}
	var out []SandboxProcess
	for pid, p := range procs {
		if pid == self || !descends(pid) {
			continue
		}
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		ns, err := os.Readlink(filepath.Join(dir, "ns/pid"))
		if err != nil {
			continue
		}
		inRange := fleet.InUIDSpan(p.uid)
		if !inRange && ns == selfNS {
			continue
		}
		sp := SandboxProcess{PID: pid, UID: p.uid, Name: p.name, PidNS: ns}
		sp.RSS, sp.PSS = memoryOf(dir)
		sp.MemCgroup = memCgroup(dir)
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil && bytes.Contains(env, []byte("CODECAGE_PRELOAD=")) {
			sp.Class = policy.DataScience
		}
		out = append(out, sp)
	}
	// A sandbox is data_science when any of its processes preloads numpy
	// (its init does not have the interpreter's environment).
	data := map[string]bool{}
	for _, p := range out {
		if p.Class == policy.DataScience {
			data[p.Sandbox()] = true
		}
	}
	for i := range out {
		out[i].Class = policy.Basic
		if data[out[i].Sandbox()] {
			out[i].Class = policy.DataScience
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// memoryOf returns the RSS (VmRSS) and PSS (smaps_rollup) of the process
// whose /proc directory is dir, in bytes.
func memoryOf(dir string) (rss, pss int64) {
	if b, err := os.ReadFile(filepath.Join(dir, "status")); err == nil {
		rss = kbField(b, "VmRSS:")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "smaps_rollup")); err == nil {
		pss = kbField(b, "Pss:")
	}
	return rss, pss
}

// kbField reads a "Key:   123 kB" line, in bytes.
func kbField(b []byte, key string) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// memCgroup returns the directory of the process's memory cgroup (v1
// memory controller, or the v2 unified hierarchy), or "".
func memCgroup(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return ""
	}
	var v2 string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" && sandboxCgroup(parts[2]) {
				return filepath.Join("/sys/fs/cgroup/memory", parts[2])
			}
		}
	}
	if v2 != "" && sandboxCgroup(v2) {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", v2, "memory.current")); err == nil {
			return filepath.Join("/sys/fs/cgroup", v2)
		}
	}
	return ""
}

// sandboxCgroup tells a sandbox's own cgroup (under a "codecage" parent)
// from the cgroup codecage itself runs in.
func sandboxCgroup(path string) bool {
	return strings.Contains(path, "/codecage/")
}

// cgroupUsage returns the memory charged to a memory cgroup directory,
// in bytes, or 0.
func cgroupUsage(dir string) int64 {
	for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
	}
	return 0
}

// MemoryClass is the idle memory of one pool class.
type MemoryClass struct {
	Class string `json:"class"`
	// Ready is how many sandboxes of the class the pool holds ready.
	Ready int `json:"ready"`
	// Sandboxes and Processes are what was found on the host: the ready
	// sandboxes, and a zygote when the class forks its sandboxes from one.
	Sandboxes int `json:"sandboxes_found"`
	Processes int `json:"processes"`
	// Per-sandbox figures, in bytes: the sums over the class's processes
	// divided by Ready.
	PSSPerSandbox int64 `json:"pss_per_sandbox_bytes"`
	RSSPerSandbox int64 `json:"rss_per_sandbox_bytes"`
	// CgroupPerSandbox is the memory cgroups' usage (page cache and
	// tmpfs included), 0 without memory cgroups.
	CgroupPerSandbox int64 `json:"cgroup_per_sandbox_bytes"`
}

// idleMemory sums the memory of the sandbox processes by class and divides
// by the ready count of each class.
func idleMemory(procs []SandboxProcess, ready map[string]int) []MemoryClass {
	var out []MemoryClass
	for _, class := range []string{policy.Basic, policy.DataScience} {
		n, ok := ready[class]
		if !ok {
			continue
		}
		mc := MemoryClass{Class: class, Ready: n}
		sandboxes, cgroups := map[string]bool{}, map[string]bool{}
		var rss, pss, cg int64
		for _, p := range procs {
			if p.Class != class {
				continue
			}
			mc.Processes++
			sandboxes[p.Sandbox()] = true
			rss += p.RSS
			pss += p.PSS
			if p.MemCgroup != "" && !cgroups[p.MemCgroup] {
				cgroups[p.MemCgroup] = true
				cg += cgroupUsage(p.MemCgroup)
			}
		}
		mc.Sandboxes = len(sandboxes)
		if n > 0 {
			mc.PSSPerSandbox, mc.RSSPerSandbox, mc.CgroupPerSandbox = pss/int64(n), rss/int64(n), cg/int64(n)
		}
		out = append(out, mc)
	}
	return out
}
