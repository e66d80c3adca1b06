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
	"github.com/codecage/codecage/internal/service"
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
	keys := []string{"gvisor_print1_warm", "gvisor_print1_sequential", "gvisor_numpy_warm", "gvisor_print1_cold", "gvisor_session_lifecycle", "gvisor_numpy_cold", "gvisor_machine_command"}
	persist := GVisorPersistKeys()
	info := fleet.ProbeGVisor(b.cfg.Runsc, b.cfg.GVisorPlatform)
	if !info.Available {
		for _, k := range append(keys, persist...) {
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
	print1 := service.Request{Code: Print1Code, UseContainer: true}
	numpy := service.Request{Code: NumpyCode, Profiles: []string{policy.DataScience}, UseContainer: true}
	refilled := func(ctx context.Context) error { return waitFull(ctx, svc, want, b.opts.PoolTimeout) }
	n := b.gvisorRuns()
	cases := []pooledCase{
		{key: keys[0], name: "use_container print(1), pool full each run", class: gvisorBasic, req: print1, n: n, c: 1, warm: true, check: checkPrint1},
		{key: keys[1], name: "use_container print(1)", class: gvisorBasic, req: print1, n: n, c: 1, warm: false, check: checkPrint1},
		{key: keys[2], name: "use_container numpy, pool full each run", class: gvisorData, req: numpy, n: max(3, n/2), c: 1, warm: true, check: checkNumpy},
	}
	for _, c := range cases {
		if err := refilled(ctx); err != nil {
			svc.Close()
			return err
		}
		b.progress("%s: %d runs", c.key, c.n)
		b.rep.Rows = append(b.rep.Rows, measurePooledCase(ctx, svc, refilled, c))
	}
	svc.Close()
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.gvisorCold(ctx, cfg, info.Platform, keys[3], keys[5], print1, numpy)
}

// gvisorCold measures use_container runs with no pool: what every one
// would cost without it, runsc booting each time.
func (b *bencher) gvisorCold(ctx context.Context, cfg config.Config, platform, print1Key, numpyKey string, print1, numpy service.Request) error {
	n := b.gvisorRuns()
	cfg.GVisorPoolSize, cfg.GVisorDataPoolSize = 0, 0
	cold, err := b.opts.NewService(cfg)
	if err != nil {
		return err
	}
	defer cold.Close()
	b.progress("%s: %d runs", print1Key, n)
	row := measure(ctx, print1Key, "use_container print(1), no pool (runsc boots each)", n, 1, execJob(cold, func(int) service.Request { return print1 }, checkPrint1))
	row.Notes = platform + " platform"
	b.rep.Rows = append(b.rep.Rows, row)
	b.progress("%s: %d runs", numpyKey, max(3, n/2))
	row = measure(ctx, numpyKey, "use_container numpy, no pool (runsc boots, numpy loads)", max(3, n/2), 1, execJob(cold, func(int) service.Request { return numpy }, checkNumpy))
	row.Notes = platform + " platform"
	b.rep.Rows = append(b.rep.Rows, row)
	b.rep.Rows = append(b.rep.Rows, b.sessionRow(ctx, cold, "gvisor_session_lifecycle", "use_container session: create, 2 cells, close", true))
	b.rep.Rows = append(b.rep.Rows, b.gvisorMachineRow(ctx, cold))
	b.rep.Rows = append(b.rep.Rows, b.commandRow(ctx, cold, "gvisor_machine_command", "use_container machine session: a command, runsc exec'd into its sandbox", true, true))
	b.persistence(ctx, cold, true)
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
