package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/bench"
)

// BenchmarkServeThroughput is what an agent sees through REST: one
// codecage serve (audit log, metrics, logs, API keys: the defaults), 8
// clients posting print(1). Besides runs/s it reports the CPU time of the
// serve process itself per run (the Go supervisor: HTTP, JSON, admission,
// the fleet, jail set-up and teardown, audit, metrics; not the sandboxes,
// which are other processes).
func BenchmarkServeThroughput(b *testing.B) {
	// CODECAGE_BENCH_SERVE_ENV adds variables to the server's environment
	// only (GOMAXPROCS=1, say), for comparing deployments.
	env := append([]string{"SANDBOX_API_KEYS=alice:" + aliceKey, "SANDBOX_RATE_LIMIT=0"}, strings.Fields(os.Getenv("CODECAGE_BENCH_SERVE_ENV"))...)
	srv := startServeOn(b, "127.0.0.1:0", env...)
	for range 20 {
		post(b, srv.url+"/execute", map[string]any{"code": "print(1)"})
	}
	const clients = 8
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 := processCPU(b, srv.cmd.Process.Pid)
	faults0 := bench.HostFaults()
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				post(b, srv.url+"/execute", map[string]any{"code": "print(1)"})
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	elapsed := time.Since(start)
	cpu := processCPU(b, srv.cmd.Process.Pid) - cpu0
	faults := bench.HostFaults() - faults0
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
	b.ReportMetric(float64(cpu)/1e6/float64(b.N), "server-cpu-ms/run")
	// Steadier than time on a shared VM: mostly the pages a cell, a fork
	// of its zygote, copies (each ~15 us on a PVM guest).
	b.ReportMetric(float64(faults)/float64(b.N), "host-faults/run")
}

// processCPU is the user and system time of one process (its own threads,
// not its children), from /proc/<pid>/stat.
func processCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond
}
