package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// pooled measures the service with its warm pools: idle memory, print(1)
// and numpy.
func (b *bencher) pooled(ctx context.Context) error {
	b.progress("starting the service, filling the warm pools (basic %d, data_science %d)", b.cfg.PoolSize, b.cfg.DataPoolSize)
	svc, err := b.opts.NewService(b.cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	b.describeIsolation(svc.Info().Isolation)

	want := wantedPools(b.cfg)
	if err := waitFull(ctx, svc, want, b.opts.PoolTimeout); err != nil {
		return err
	}
	b.progress("measuring the idle memory of the pools")
	b.rep.Memory, b.rep.MemorySettled = settledMemory(ctx, want)

	// A few runs first: the first ones pay for cold page caches.
	for range 3 {
		_, _ = svc.Execute(ctx, service.Request{Code: Print1Code})
	}
	refilled := func(ctx context.Context) error { return waitFull(ctx, svc, want, b.opts.PoolTimeout) }
	for _, c := range b.pooledCases() {
		if _, pooled := want[c.class]; c.warm && !pooled {
			b.rep.Rows = append(b.rep.Rows, Row{Key: c.key, Case: c.name, Clients: c.c, Skipped: "no " + c.class + " pool configured"})
			continue
		}
		if err := refilled(ctx); err != nil {
			return err
		}
		b.progress("%s: %d runs, %d client(s)", c.key, c.n, c.c)
		row := measurePooledCase(ctx, svc, refilled, c)
		if err := ctx.Err(); err != nil {
			return err
		}
		b.rep.Rows = append(b.rep.Rows, row)
	}
	b.rep.Rows = append(b.rep.Rows, b.sessionRow(ctx, svc, "session_lifecycle", "session: create, 2 cells, close", false))
	b.rep.Rows = append(b.rep.Rows, b.machineRow(ctx, svc))
	b.rep.Rows = append(b.rep.Rows, b.commandRow(ctx, svc, "session_command", "session: a command, each in a jail of its own", false, false))
	b.rep.Rows = append(b.rep.Rows, b.commandRow(ctx, svc, "machine_command", "machine session: a command, a process of its sandbox", true, false))
	b.persistence(ctx, svc, false)
	return ctx.Err()
}

// describeIsolation records what the service reports about its isolation
// in the report's machine section.
func (b *bencher) describeIsolation(iso service.IsolationInfo) {
	m := &b.rep.Machine
	m.Python = iso.PythonVersion
	m.Isolation = fmt.Sprintf("backend %s, cgroup %s, Landlock ABI %d, seccomp %v, rootless %v", iso.Backend, iso.Cgroup, iso.LandlockABI, iso.Seccomp, iso.Rootless)
	if len(iso.Warnings) > 0 {
		m.Warnings = iso.Warnings
	}
}

// pooledCase is one row of the pooled measurements.
type pooledCase struct {
	key, name string
	req       service.Request
	class     string
	n, c      int
	check     func(*service.Result) string
	warm      bool // wait, untimed, for a full pool before each run
}

// pooledCases are print(1) and numpy, each back to back, concurrent and
// warm. The warm cases give the latency of a run that finds a ready
// sandbox, whatever the refill rate; the others run back to back, as a
// client would.
func (b *bencher) pooledCases() []pooledCase {
	print1 := service.Request{Code: Print1Code}
	// No profile: an agent sends only code, and the data_science class
	// is found from the code's imports.
	numpy := service.Request{Code: NumpyCode}
	nNumpy := max(1, b.n/2)
	const numpyName = "numpy arange(10**6).sum()"
	return []pooledCase{
		{"print1_sequential", "print(1)", print1, policy.Basic, b.n, 1, checkPrint1, false},
		{"print1_concurrent", "print(1)", print1, policy.Basic, 2 * b.n, b.clients, checkPrint1, false},
		{"print1_warm", "print(1), pool full each run", print1, policy.Basic, b.n, 1, checkPrint1, true},
		{"numpy_sequential", numpyName, numpy, policy.DataScience, nNumpy, 1, checkNumpy, false},
		{"numpy_concurrent", numpyName, numpy, policy.DataScience, 2 * nNumpy, b.clients, checkNumpy, false},
		{"numpy_warm", "numpy, pool full each run", numpy, policy.DataScience, nNumpy, 1, checkNumpy, true},
	}
}

// measurePooledCase runs one case, from a full pool, and counts the pool
// hits and misses it caused. A warm case calls refilled, untimed, before
// each run.
func measurePooledCase(ctx context.Context, svc *service.Service, refilled func(context.Context) error, c pooledCase) Row {
	var before func(context.Context) error
	if c.warm {
		before = refilled
	}
	start := svc.PoolStats()[c.class]
	row := measureWith(ctx, c.key, c.name, c.n, c.c, before, execJob(svc, func(int) service.Request { return c.req }, c.check))
	end := svc.PoolStats()[c.class]
	row.PoolHits, row.PoolMisses = end.Hits-start.Hits, end.Misses-start.Misses
	if c.warm {
		row.Throughput = 0 // the waits for the refill are not the service's throughput
		row.Notes = "latency only: each run waits, untimed, for a full pool"
	}
	return row
}

// execJob runs req(i) through the service; a run fails when the service
// errs, the result is not a success, or check finds the output wrong.
func execJob(svc *service.Service, req func(int) service.Request, check func(*service.Result) string) job {
	return func(ctx context.Context, i int) string {
		res, err := svc.Execute(ctx, req(i))
		if msg := describe(res, err); msg != "" {
			return msg
		}
		return check(res)
	}
}

// describe says why a run failed, or "" when it succeeded.
func describe(res *service.Result, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case res.Success:
		return ""
	case res.Error != nil:
		return res.Error.Type + ": " + firstLine(res.Error.Message)
	}
	// Not a success, yet no error: say what the result does hold.
	msg := fmt.Sprintf("no success and no error: exit status %d", res.ExitCode)
	if res.Limit != nil {
		msg += ", limit " + *res.Limit
	}
	if res.Stderr != "" {
		msg += fmt.Sprintf(", stderr %q", firstLine(res.Stderr))
	}
	return msg
}

func checkPrint1(res *service.Result) string {
	if res.Stdout != "1\n" {
		return fmt.Sprintf("stdout %q, want \"1\\n\"", res.Stdout)
	}
	return ""
}

func checkNumpy(res *service.Result) string {
	if !strings.Contains(string(res.Result), numpySum) {
		return fmt.Sprintf("result %s, want %s", res.Result, numpySum)
	}
	return ""
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// wantedPools is the ready count of each pool the configuration starts.
func wantedPools(cfg config.Config) map[string]int {
	want := map[string]int{}
	if cfg.PoolSize > 0 {
		want[policy.Basic] = cfg.PoolSize
	}
	if cfg.DataPoolSize > 0 && cfg.EnableDataScience {
		want[policy.DataScience] = cfg.DataPoolSize
	}
	return want
}

// waitFull waits until every pool holds its ready count.
func waitFull(ctx context.Context, svc *service.Service, want map[string]int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		stats := svc.PoolStats()
		if full(stats, want) {
			return nil
		}
		if time.Now().After(deadline) {
			var parts []string
			for class, n := range want {
				parts = append(parts, fmt.Sprintf("%s %d/%d ready", class, stats[class].Ready, n))
			}
			return fmt.Errorf("warm pools not full after %s: %s", timeout, strings.Join(parts, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func full(stats map[string]fleet.PoolStats, want map[string]int) bool {
	for class, n := range want {
		if stats[class].Ready < n {
			return false
		}
	}
	return true
}

// settledMemory measures the pools' idle memory once the sandboxes are
// all found and their memory stops changing (a data_science sandbox is
// ready before it has finished loading numpy and pandas).
func settledMemory(ctx context.Context, want map[string]int) ([]MemoryClass, bool) {
	wantSandboxes := 0
	for _, n := range want {
		wantSandboxes += n
	}
	var prev int64 = -1
	deadline := time.Now().Add(15 * time.Second)
	for {
		procs := SandboxProcesses()
		var total int64
		sandboxes := map[string]bool{}
		for _, p := range procs {
			total += p.PSS + p.RSS
			sandboxes[p.Sandbox()] = true
		}
		stable := prev >= 0 && abs(total-prev) <= total/100 && len(sandboxes) >= wantSandboxes
		if stable || time.Now().After(deadline) || ctx.Err() != nil {
			return idleMemory(procs, want), stable
		}
		prev = total
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
