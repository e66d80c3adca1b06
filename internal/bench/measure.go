package bench

import (
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Row is one measured case: runs of the same work, sequential (Clients 1)
// or from several concurrent clients. Latencies are in milliseconds.
type Row struct {
	// Key names the case for programs (e.g. "print1_concurrent").
	Key string `json:"key"`
	// Case is the human name (e.g. "print(1)").
	Case    string `json:"case"`
	Runs    int    `json:"runs"`
	Clients int    `json:"clients"`
	// Errors counts runs that failed: an error from the service, or a
	// result that was not a success or not the expected output. Their
	// latencies are still in the percentiles.
	Errors int `json:"errors"`
	// FirstError describes the first failed run, if any.
	FirstError string  `json:"first_error,omitempty"`
	P50        float64 `json:"p50_ms"`
	P95        float64 `json:"p95_ms"`
	P99        float64 `json:"p99_ms"`
	Mean       float64 `json:"mean_ms"`
	Max        float64 `json:"max_ms"`
	// WallSeconds is the time of the whole case; Throughput is Runs over it.
	WallSeconds float64 `json:"wall_seconds"`
	Throughput  float64 `json:"runs_per_sec"`
	// PoolHits and PoolMisses are the warm pool's counts during the case
	// (a miss starts a sandbox on demand).
	PoolHits   int64 `json:"pool_hits,omitempty"`
	PoolMisses int64 `json:"pool_misses,omitempty"`
	// SupervisorCPU is the CPU time of this process (the Go supervisor:
	// admission, pools, jail set-up and teardown, audit, metrics; not the
	// sandboxes) per run during the case, in milliseconds.
	SupervisorCPU float64 `json:"supervisor_cpu_ms_per_run,omitempty"`
	// HostFaults is the whole host's page faults per run during the case
	// (/proc/vmstat): steadier than time on a shared VM, and each is a
	// page a cell copied from its zygote, ~15 us on a PVM guest.
	HostFaults float64 `json:"host_faults_per_run,omitempty"`
	// Skipped says why the case was not measured (e.g. "not installed").
	Skipped string `json:"skipped,omitempty"`
	Notes   string `json:"notes,omitempty"`
}

// job is one run of a case; it returns a description of the failure, or
// "" when the run succeeded.
type job func(ctx context.Context, i int) string

// measure runs n jobs from the given number of clients and fills a row
// with their latencies. A canceled context stops the case early; the
// caller checks ctx.Err.
func measure(ctx context.Context, key, name string, n, clients int, run job) Row {
	return measureWith(ctx, key, name, n, clients, nil, run)
}

// measureWith is measure with an untimed step before each job: when it
// fails, the job does not run and counts as failed.
func measureWith(ctx context.Context, key, name string, n, clients int, before func(context.Context) error, run job) Row {
	clients = max(1, min(clients, n))
	lat := make([]time.Duration, n)
	done := make([]bool, n)
	var (
		next   atomic.Int64
		mu     sync.Mutex
		errs   int
		first  string
		wg     sync.WaitGroup
		starts = time.Now()
		cpu0   = processCPU()
		flt0   = HostFaults()
	)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if before != nil {
					if err := before(ctx); err != nil {
						if ctx.Err() != nil {
							return
						}
						mu.Lock()
						errs++
						if first == "" {
							first = err.Error()
						}
						mu.Unlock()
						continue
					}
				}
				t0 := time.Now()
				msg := run(ctx, i)
				lat[i] = time.Since(t0)
				done[i] = true
				if msg != "" {
					mu.Lock()
					errs++
					if first == "" {
						first = msg
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(starts)
	cpu := processCPU() - cpu0
	faults := HostFaults() - flt0
	var got []time.Duration
	for i, d := range lat {
		if done[i] {
			got = append(got, d)
		}
	}
	row := Row{Key: key, Case: name, Runs: len(got), Clients: clients, Errors: errs, FirstError: first, WallSeconds: wall.Seconds()}
	fillLatency(&row, got)
	if len(got) > 0 && cpu > 0 {
		row.SupervisorCPU = ms(cpu) / float64(len(got))
	}
	if len(got) > 0 && flt0 > 0 && faults > 0 {
		row.HostFaults = float64(faults) / float64(len(got))
	}
	if wall > 0 {
		row.Throughput = float64(len(got)) / wall.Seconds()
	}
	return row
}

// fillLatency sets the percentiles, mean and max of row from lat.
func fillLatency(row *Row, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	row.P50 = ms(percentile(s, 50))
	row.P95 = ms(percentile(s, 95))
	row.P99 = ms(percentile(s, 99))
	row.Mean = ms(sum / time.Duration(len(s)))
	row.Max = ms(s[len(s)-1])
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000
}

// processCPU is the user and system time of this process so far, all its
// threads; the sandboxes are other processes and are not in it.
// HostFaults is the host's page faults so far (/proc/vmstat pgfault), 0
// when unknown: the whole machine's, so a benchmark reads it with nothing
// else running.
func HostFaults() int64 {
	raw, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "pgfault "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
