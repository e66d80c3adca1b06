package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// cpuTicks reads the host's busy and total jiffies from /proc/stat.
func cpuTicks(t testing.TB) (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.SplitN(string(b), "\n", 2)[0]
	for i, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseInt(f, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// BenchmarkZygoteThroughput measures pooled print(1) throughput with
// concurrent clients and the host CPU it costs (b.N runs in all;
// CODECAGE_PERF_CLIENTS, CODECAGE_PERF_NUMPY and CODECAGE_PERF_CODE vary it).
func BenchmarkZygoteThroughput(t *testing.B) {
	n := t.N
	clients := 8
	if c, _ := strconv.Atoi(os.Getenv("CODECAGE_PERF_CLIENTS")); c > 0 {
		clients = c
	}
	code := "print(1)"
	var profiles []string
	cfg := config.DefaultConfig()
	cfg.SessionPoolSize = 0 // stateless runs only
	cfg.MachinePoolSize = 0
	if os.Getenv("CODECAGE_PERF_NUMPY") != "" {
		cfg.EnableDataScience = true
		code = "import numpy; numpy.arange(10**6).sum()"
		profiles = []string{policy.DataScience}
	} else {
		cfg.DataPoolSize = 0
	}
	if c := os.Getenv("CODECAGE_PERF_CODE"); c != "" {
		code = c
		cfg.AllowedImports = []string{policy.AllImports}
	}
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	wait := func() {
		for i := 0; i < 2000; i++ {
			st := svc.PoolStats()
			ok := true
			for _, s := range st {
				if s.Ready < cfg.PoolSize && (len(profiles) == 0 || s.Ready < cfg.DataPoolSize) {
					ok = false
				}
			}
			if ok {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait()
	if d, _ := time.ParseDuration(os.Getenv("CODECAGE_PERF_SLEEP")); d > 0 {
		time.Sleep(d)
	}
	for range 5 {
		svc.Execute(ctx, service.Request{Code: code, Profiles: profiles})
	}
	// sequential, pool full each run
	var lat []time.Duration
	for range 20 {
		wait()
		s := time.Now()
		res, err := svc.Execute(ctx, service.Request{Code: code, Profiles: profiles})
		if err != nil || !res.Success {
			t.Fatalf("%v %+v", err, res)
		}
		lat = append(lat, time.Since(s))
		if os.Getenv("CODECAGE_PERF_CODE") != "" {
			t.Logf("%s %s", res.Stdout, res.Result)
		}
	}
	t.Logf("warm latencies: %v", lat)
	wait()
	time.Sleep(200 * time.Millisecond)
	b0, t0 := cpuTicks(t)
	all0, zyg0 := cgCPU()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := 0
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				res, err := svc.Execute(ctx, service.Request{Code: code, Profiles: profiles})
				if err != nil || !res.Success {
					mu.Lock()
					errs++
					if errs <= 3 {
						t.Logf("failed: %v %+v %+v", err, res, res.Error)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b1, t1 := cpuTicks(t)
	all1, zyg1 := cgCPU()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	self := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	per := func(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6/float64(n)) }
	t.Logf("per run: supervisor %s, zygote %s, cells %s", per(self), per(zyg1-zyg0), per(all1-all0-(zyg1-zyg0)))
	t.Logf("%d runs, %d clients: %.1f runs/s, %d errors; host CPU busy %.0f%%, %.2f ms CPU per run; stats %+v",
		n, clients, float64(n)/el.Seconds(), errs, 100*float64(b1-b0)/float64(t1-t0), float64(b1-b0)*10/float64(n), svc.PoolStats())
}

// cgCPU reads the CPU time of every sandbox cgroup together, and of the
// zygotes' own cgroups.
func cgCPU() (all, zygotes time.Duration) {
	dir := "/sys/fs/cgroup/cpuacct/codecage"
	read := func(p string) time.Duration {
		b, _ := os.ReadFile(filepath.Join(p, "cpuacct.usage"))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(n)
	}
	all = read(dir)
	prefix := strconv.Itoa(os.Getpid()) + "-"
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && !strings.Contains(e.Name(), "cell-") {
			zygotes += read(filepath.Join(dir, e.Name()))
		}
	}
	return all, zygotes
}
