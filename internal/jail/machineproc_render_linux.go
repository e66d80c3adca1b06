package jail

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux).
const userHZ = 100

// render writes the machine's /proc files from st. Each number has a fixed
// width, so a file's length never changes and a write over it in place is
// all a refresh takes: a reader sees the old figures or the new ones,
// never a cut line.
func (mp *machineProc) render(st machineStats) {
	var up unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &up)
	uptime := time.Duration(up.Nano())
	for i := range mp.files {
		mp.buf.Reset()
		switch machineProcFiles[i] {
		case "meminfo":
			mp.meminfo(st)
		case "stat":
			mp.stat(st, uptime)
		case "uptime":
			idle := max(uptime*time.Duration(mp.cpus)-time.Duration(st.CPU), 0)
			fmt.Fprintf(&mp.buf, "%14.2f %14.2f\n", uptime.Seconds(), idle.Seconds())
		case "loadavg":
			fmt.Fprintf(&mp.buf, "0.00 0.00 0.00 %6d/%6d %8d\n", 1, max(st.Tasks, 1), 0)
		}
		_, _ = mp.files[i].WriteAt(mp.buf.Bytes(), 0)
	}
}

// meminfo is the cgroup's memory as a machine of its limit's size: what
// free and top print, and %MEM in ps.
func (mp *machineProc) meminfo(st machineStats) {
	total := max(mp.memTotal, 0)
	used := min(max(st.MemoryUsed, 0), total)
	cache := min(max(st.Cache, 0), used)
	shared := min(max(st.Shared, 0), cache)
	free := total - used
	available := free + cache - shared
	for _, kv := range []struct {
		k string
		v int64
	}{
		{"MemTotal", total}, {"MemFree", free}, {"MemAvailable", available},
		{"Buffers", 0}, {"Cached", cache}, {"SwapCached", 0},
		{"Active", used - cache + shared}, {"Inactive", cache - shared},
		{"Shmem", shared}, {"SReclaimable", 0}, {"SUnreclaim", 0},
		{"SwapTotal", 0}, {"SwapFree", 0},
	} {
		fmt.Fprintf(&mp.buf, "%-16s%14d kB\n", kv.k+":", kv.v>>10)
	}
}

// stat is the cgroup's CPU time as the machine's, shared evenly among its
// CPUs (top's per-CPU view), the rest of each CPU's time idle.
func (mp *machineProc) stat(st machineStats, uptime time.Duration) {
	n := int64(max(mp.cpus, 1))
	busy := max(st.CPU, 0) * userHZ / int64(time.Second)
	idle := max(int64(uptime)*userHZ/int64(time.Second)*n-busy, 0)
	line := func(name string, busy, idle int64) {
		fmt.Fprintf(&mp.buf, "%-6s%14d 0 0 %14d 0 0 0 0 0 0\n", name, busy, idle)
	}
	line("cpu", busy, idle)
	for i := range n {
		line(fmt.Sprintf("cpu%d", i), busy/n, idle/n)
	}
	fmt.Fprintf(&mp.buf, "intr 0\nctxt 0\nbtime %14d\nprocesses %14d\nprocs_running %6d\nprocs_blocked 0\nsoftirq 0\n",
		mp.btime, max(st.Tasks, 0), 1)
}
