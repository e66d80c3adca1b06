package report

import (
	"math"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// SessionMetrics is what a session's sandbox uses now: E2B's
// SandboxMetric, which getMetrics reports.
type SessionMetrics struct {
	Timestamp time.Time `json:"timestamp"`
	// CPUCount is the session's CPU bandwidth, in whole cores.
	CPUCount int `json:"cpu_count" doc:"The session's CPU bandwidth in whole cores." jsonschema:"The session's CPU bandwidth in whole cores."`
	// CPUUsedPct is the CPU its processes used since the previous sample
	// (or since it started), in percent of its bandwidth.
	CPUUsedPct float64 `json:"cpu_used_pct" doc:"CPU used since the previous sample (or the start), in percent of the bandwidth." jsonschema:"CPU used since the previous sample (or the start), in percent of the bandwidth."`
	// MemUsed is the memory of its interpreter and running commands
	// (their cgroups', page cache included); MemTotal is its memory limit.
	MemUsed  int64 `json:"mem_used" doc:"Bytes of memory of the interpreter and running commands." jsonschema:"Bytes of memory of the interpreter and running commands."`
	MemTotal int64 `json:"mem_total" doc:"The memory limit in bytes." jsonschema:"The memory limit in bytes."`
	// DiskUsed is what its workspace holds; DiskTotal its size limit.
	DiskUsed  int64 `json:"disk_used" doc:"Bytes the workspace holds." jsonschema:"Bytes the workspace holds."`
	DiskTotal int64 `json:"disk_total" doc:"The workspace's size limit in bytes." jsonschema:"The workspace's size limit in bytes."`
}

// Sample is the metrics of a session whose sandbox has limits lim (the
// operator's caps where a limit is unset) and uses use now, of which cpu
// over wall since the previous sample; the disk is left to the caller.
func Sample(now time.Time, lim fleet.Limits, caps fleet.Caps, use fleet.Usage, cpu, wall time.Duration) *SessionMetrics {
	cores := lim.CPUCores
	if !(cores > 0) {
		cores = caps.CPUCores
	}
	mem := lim.MemoryBytes
	if mem <= 0 {
		mem = caps.Memory
	}
	pct := 0.0
	if wall > 0 && cores > 0 {
		pct = math.Min(100, math.Max(0, 100*cpu.Seconds()/(wall.Seconds()*cores)))
	}
	return &SessionMetrics{Timestamp: now.UTC(), CPUCount: max(1, int(math.Ceil(cores))), CPUUsedPct: math.Round(pct*100) / 100,
		MemUsed: use.Memory, MemTotal: mem, DiskTotal: caps.Workspace}
}
