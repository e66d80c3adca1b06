package service

import (
	"context"
	"fmt"
	"math"
	"time"
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

// SessionMetrics samples what one of the owner's sessions uses now, from
// its sandboxes' cgroups (v1 or v2) and its workspace. A paused session
// that is parked (its sandbox ended) answers ErrSessionPaused.
func (s *Service) SessionMetrics(ctx context.Context, id, owner string) (*SessionMetrics, error) {
	return do(ctx, s, opMetrics, call[*SessionMetrics]{
		session: id, owner: owner,
		run: func(ctx context.Context) (*SessionMetrics, error) {
			se, err := s.session(id, owner)
			if err != nil {
				if _, ok, perr := s.parked(ctx, owner, id); ok && perr == nil {
					return nil, fmt.Errorf("%w: session %s is parked: it has no sandbox to measure", ErrSessionPaused, Quote(id))
				}
				return nil, err
			}
			now := time.Now()
			lim := se.Limits()
			cores := lim.CPUCores
			if !(cores > 0) {
				cores = s.cfg.CPULimit
			}
			mem := lim.MemoryBytes
			if mem <= 0 {
				mem = s.cfg.MemoryLimit
			}
			use := se.Usage()
			cpu, wall := se.CPUSinceLastSample(now, use.CPU)
			pct := 0.0
			if wall > 0 && cores > 0 {
				pct = math.Min(100, math.Max(0, 100*cpu.Seconds()/(wall.Seconds()*cores)))
			}
			m := &SessionMetrics{Timestamp: now.UTC(), CPUCount: max(1, int(math.Ceil(cores))), CPUUsedPct: math.Round(pct*100) / 100,
				MemUsed: use.Memory, MemTotal: mem, DiskTotal: s.cfg.WorkspaceMax}
			m.DiskUsed, err = s.files.WorkspaceUsed(ctx, se)
			if err != nil {
				return nil, err
			}
			return m, nil
		},
	})
}

func serveMetrics(ctx context.Context, s *Service, call PeerCall, _ noArgs, _ outputFunc) (*SessionMetrics, error) {
	return s.SessionMetrics(ctx, call.SessionID, call.Owner)
}
