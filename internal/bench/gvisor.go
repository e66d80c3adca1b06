package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/sandbox"
)

// gVisor's classes, as PoolStats names them.
var (
	gvisorBasic = config.IsolationGVisor + "/" + policy.Basic
	gvisorData  = config.IsolationGVisor + "/" + policy.DataScience
)

// gvisorRuns is how many runs each gVisor case makes: a cold gVisor
// sandbox costs a few hundred milliseconds, so fewer than the native cases.
func (b *bencher) gvisorRuns() int { return max(5, b.n/10) }

// gvisor measures use_container runs: from the warm gVisor pool (waiting
// for a full pool before each run, and back to back) and cold (no pool),
// and the idle memory of a ready gVisor sandbox.
func (b *bencher) gvisor(ctx context.Context) error {
	keys := []string{"gvisor_print1_warm", "gvisor_print1_sequential", "gvisor_numpy_warm", "gvisor_print1_cold", "gvisor_session_lifecycle", "gvisor_numpy_cold"}
	info := fleet.ProbeGVisor(b.cfg.Runsc, b.cfg.GVisorPlatform)
	if !info.Available {
		for _, k := range keys {
			b.rep.Rows = append(b.rep.Rows, Row{Key: k, Case: "use_container " + k, Clients: 1, Skipped: "gVisor unavailable: " + info.Error})
		}
		return nil
	}
	b.rep.GVisor = info
	cfg := b.cfg
	cfg.EnableContainerMode = true
	cfg.PoolSize, cfg.DataPoolSize = 0, 0
	cfg.GVisorPoolSize = max(cfg.GVisorPoolSize, 1)
	cfg.GVisorDataPoolSize = max(cfg.GVisorDataPoolSize, 1)
	b.progress("gVisor (%s, %s): filling its pools (basic %d, data_science %d)", info.Version, info.Platform, cfg.GVisorPoolSize, cfg.GVisorDataPoolSize)
	svc, err := b.opts.NewService(cfg)
	if err != nil {
		return err
	}
	want := map[string]int{gvisorBasic: cfg.GVisorPoolSize, gvisorData: cfg.GVisorDataPoolSize}
	if err := waitFull(ctx, svc, want, b.opts.PoolTimeout); err != nil {
		svc.Close()
		return err
	}
	b.rep.GVisorMemory = gvisorIdleMemory(cfg.GVisorPoolSize + cfg.GVisorDataPoolSize)
	print1 := sandbox.Request{Code: Print1Code, UseContainer: true}
	numpy := sandbox.Request{Code: NumpyCode, Profiles: []string{policy.DataScience}, UseContainer: true}
	refilled := func(ctx context.Context) error { return waitFull(ctx, svc, want, b.opts.PoolTimeout) }
	n := b.gvisorRuns()
	cases := []struct {
		key, name, class string
		req              sandbox.Request
		n                int
		warm             bool
		check            func(*sandbox.Result) string
	}{
		{keys[0], "use_container print(1), pool full each run", gvisorBasic, print1, n, true, checkPrint1},
		{keys[1], "use_container print(1)", gvisorBasic, print1, n, false, checkPrint1},
		{keys[2], "use_container numpy, pool full each run", gvisorData, numpy, max(3, n/2), true, checkNumpy},
	}
	for _, c := range cases {
		if err := refilled(ctx); err != nil {
			svc.Close()
			return err
		}
		b.progress("%s: %d runs", c.key, c.n)
		var before func(context.Context) error
		if c.warm {
			before = refilled
		}
		start := svc.PoolStats()[c.class]
		row := measureWith(ctx, c.key, c.name, c.n, 1, before, execJob(svc, func(int) sandbox.Request { return c.req }, c.check))
		end := svc.PoolStats()[c.class]
		row.PoolHits, row.PoolMisses = end.Hits-start.Hits, end.Misses-start.Misses
		if c.warm {
			row.Throughput = 0
			row.Notes = "latency only: each run waits, untimed, for a full pool"
		}
		b.rep.Rows = append(b.rep.Rows, row)
	}
	svc.Close()
	if err := ctx.Err(); err != nil {
		return err
	}

	// Cold: what every use_container run would cost without the pool.
	cfg.GVisorPoolSize, cfg.GVisorDataPoolSize = 0, 0
	cold, err := b.opts.NewService(cfg)
	if err != nil {
		return err
	}
	defer cold.Close()
	b.progress("%s: %d runs", keys[3], n)
	row := measure(ctx, keys[3], "use_container print(1), no pool (runsc boots each)", n, 1, execJob(cold, func(int) sandbox.Request { return print1 }, checkPrint1))
	row.Notes = info.Platform + " platform"
	b.rep.Rows = append(b.rep.Rows, row)
	b.progress("%s: %d runs", keys[5], max(3, n/2))
	row = measure(ctx, keys[5], "use_container numpy, no pool (runsc boots, numpy loads)", max(3, n/2), 1, execJob(cold, func(int) sandbox.Request { return numpy }, checkNumpy))
	row.Notes = info.Platform + " platform"
	b.rep.Rows = append(b.rep.Rows, row)
	b.rep.Rows = append(b.rep.Rows, b.sessionRow(ctx, cold, "gvisor_session_lifecycle", "use_container session: create, 2 cells, close", true))
	return ctx.Err()
}

// gvisorIdleMemory is the memory cgroups of the ready gVisor sandboxes
// (Sentry, Gofer and the harness, page cache and tmpfs included), over
// their number.
func gvisorIdleMemory(ready int) int64 {
	// The jail names them <pid>-gv-<id> under a codecage directory in this
	// process's own cgroup (v1 memory hierarchy, or v2).
	var dirs []string
	for _, base := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup"} {
		for _, depth := range []string{"", "/*", "/*/*", "/*/*/*"} {
			found, _ := filepath.Glob(base + depth + "/codecage/" + strconv.Itoa(os.Getpid()) + "-gv-*")
			dirs = append(dirs, found...)
		}
		if len(dirs) > 0 {
			break
		}
	}
	var total int64
	for _, d := range dirs {
		for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				total += v
				break
			}
		}
	}
	if len(dirs) == 0 || ready == 0 {
		return 0
	}
	return total / int64(len(dirs))
}

// gvisorSummary is the table's line about gVisor.
func (r *Report) gvisorSummary() string {
	if !r.GVisor.Available {
		return ""
	}
	return fmt.Sprintf("gVisor: %s, platform %s; idle memory per ready gVisor sandbox %.1f MiB (its cgroup)",
		r.GVisor.Version, r.GVisor.Platform, float64(r.GVisorMemory)/(1<<20))
}
