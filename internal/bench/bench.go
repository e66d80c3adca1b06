// Package bench measures the sandbox service the way a user meets it: the
// latency and throughput of stateless runs from warm pools, sequential and
// from concurrent clients, the HumanEval and MBPP reference solutions
// under the default policy, the idle
// memory of a pooled sandbox, and the same print(1) as a bare interpreter
// (and under bwrap, when installed) for comparison.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/dataset"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/sandbox"
)

// Defaults of [Options].
const (
	DefaultN       = 200
	DefaultClients = 8
	// QuickN and QuickHumanEval are the sizes of a quick run (the first
	// QuickHumanEval problems of HumanEval and of MBPP).
	QuickN         = 20
	QuickHumanEval = 20
	// DefaultPoolTimeout bounds each wait for the warm pools to fill.
	DefaultPoolTimeout = 2 * time.Minute
)

// The code of the stateless cases.
const (
	Print1Code = "print(1)"
	NumpyCode  = "import numpy; numpy.arange(10**6).sum()"
	numpySum   = "499999500000"
)

// Options say what to measure.
type Options struct {
	// Config is the operator configuration of the service under test; the
	// zero value means config.DefaultConfig(). The data_science profile is
	// enabled whatever it says (the numpy case needs it).
	Config config.Config
	// NewService starts a service (default sandbox.New).
	NewService func(config.Config) (*sandbox.Service, error)
	// N is the number of sequential print(1) runs (default 200, 20 when
	// Quick); the concurrent case runs 2N, numpy N/2 and N.
	N int
	// Clients is the number of concurrent clients (default 8).
	Clients int
	// HumanEvalPath is a HumanEval JSONL(.gz) file to run instead of the
	// embedded set; a path given but unreadable is an error.
	HumanEvalPath string
	// HumanEvalLimit runs only the first problems of HumanEval and of
	// MBPP (0: all; 20 when Quick).
	HumanEvalLimit int
	// SkipMBPP leaves MBPP out (974 programs).
	SkipMBPP bool
	// Quick shrinks the run for tests: N 20, 20 HumanEval and MBPP problems.
	Quick bool
	// GVisorOnly measures the gVisor cases alone (to compare runsc builds
	// and platforms).
	GVisorOnly bool
	// PoolTimeout bounds each wait for the pools to fill (default 2 min).
	PoolTimeout time.Duration
	// Progress, when set, receives a line as each case starts.
	Progress io.Writer
}

// Report is everything one run measured.
type Report struct {
	Machine Machine `json:"machine"`
	Setup   Setup   `json:"setup"`
	// Rows are the cases, in the order they ran.
	Rows []Row `json:"rows"`
	// Memory is the idle memory of each pool class.
	Memory []MemoryClass `json:"idle_memory"`
	// MemorySettled is false when the sandboxes' memory kept changing
	// until the measurement gave up waiting.
	MemorySettled bool  `json:"idle_memory_settled"`
	HumanEval     Suite `json:"humaneval"`
	MBPP          Suite `json:"mbpp"`
	// Print1OverBare is print(1)'s sequential p50 over the bare
	// interpreter's (0 when either is missing).
	Print1OverBare float64  `json:"print1_p50_over_bare_python_p50"`
	Targets        []Target `json:"targets"`
	// GVisor is the gVisor backend the use_container rows ran on.
	GVisor fleet.GVisorAvailability `json:"gvisor"`
	// GVisorMemory is the idle memory of a ready gVisor sandbox, in bytes.
	GVisorMemory int64 `json:"gvisor_idle_memory_bytes"`
}

// Machine describes the host.
type Machine struct {
	Cores         int    `json:"cores"`
	CPU           string `json:"cpu,omitempty"`
	MemTotalBytes int64  `json:"mem_total_bytes,omitempty"`
	Kernel        string `json:"kernel"`
	GoVersion     string `json:"go_version"`
	Python        string `json:"python_version"`
	Interpreter   string `json:"interpreter"`
	// Isolation is a summary of the layers every sandbox gets here.
	Isolation string   `json:"isolation"`
	Warnings  []string `json:"warnings,omitempty"`
}

// Setup is what the run was asked to do.
type Setup struct {
	N              int    `json:"n"`
	Clients        int    `json:"clients"`
	Quick          bool   `json:"quick"`
	PoolSize       int    `json:"pool_size"`
	DataPoolSize   int    `json:"data_science_pool_size"`
	MaxSandboxes   int    `json:"max_sandboxes"`
	HumanEvalLimit int    `json:"humaneval_limit"`
	Started        string `json:"started"`
}

// Target is one goal and whether the run met it.
type Target struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	// Note qualifies the verdict (e.g. measured with other settings).
	Note string `json:"note,omitempty"`
}

// Row returns the row with the given key, or nil.
func (r *Report) Row(key string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Key == key {
			return &r.Rows[i]
		}
	}
	return nil
}

// Run measures, in one go: print(1) and numpy from the warm pools,
// sequential and concurrent; the idle memory of the pools; HumanEval; the
// bare interpreter and bwrap. Failed runs are counted in their rows; the
// error is for a bench that cannot run (no sandbox, pools that never fill,
// a canceled context, an unreadable HumanEval file that was asked for).
func Run(ctx context.Context, opts Options) (*Report, error) {
	b, err := newBencher(opts)
	if err != nil {
		return nil, err
	}
	return b.run(ctx)
}

type bencher struct {
	opts            Options
	cfg             config.Config
	n               int
	clients         int
	humanEval, mbpp []dataset.Task
	rep             *Report
}

func newBencher(opts Options) (*bencher, error) {
	cfg := opts.Config
	if cfg.Interpreter == "" {
		cfg = config.DefaultConfig()
	}
	cfg.EnableDataScience = true
	if opts.NewService == nil {
		opts.NewService = func(cfg config.Config) (*sandbox.Service, error) { return sandbox.New(cfg, nil) }
	}
	if opts.PoolTimeout <= 0 {
		opts.PoolTimeout = DefaultPoolTimeout
	}
	n := opts.N
	if n <= 0 {
		n = DefaultN
		if opts.Quick {
			n = QuickN
		}
	}
	clients := opts.Clients
	if clients <= 0 {
		clients = DefaultClients
	}
	limit := opts.HumanEvalLimit
	if limit <= 0 && opts.Quick {
		limit = QuickHumanEval
	}
	b := &bencher{opts: opts, cfg: cfg, n: n, clients: clients}
	b.rep = &Report{
		Machine: machine(cfg.Interpreter),
		Setup: Setup{N: n, Clients: clients, Quick: opts.Quick, PoolSize: cfg.PoolSize, DataPoolSize: cfg.DataPoolSize,
			MaxSandboxes: cfg.MaxSandboxes, HumanEvalLimit: limit, Started: time.Now().Format(time.RFC3339)},
	}
	var err error
	b.humanEval, err = loadSuite(&b.rep.HumanEval, opts.HumanEvalPath, dataset.HumanEvalName, dataset.HumanEval, limit)
	if err != nil {
		return nil, fmt.Errorf("humaneval: %w", err)
	}
	if opts.SkipMBPP {
		b.rep.MBPP.Skipped = "left out (--skip-mbpp)"
	} else {
		b.mbpp, _ = loadSuite(&b.rep.MBPP, "", dataset.MBPPName, dataset.MBPP, limit)
	}
	return b, nil
}

func (b *bencher) progress(format string, args ...any) {
	if b.opts.Progress != nil {
		fmt.Fprintf(b.opts.Progress, "bench: "+format+"\n", args...)
	}
}

func (b *bencher) run(ctx context.Context) (*Report, error) {
	if !b.opts.GVisorOnly {
		if err := b.pooled(ctx); err != nil {
			return nil, err
		}
		if err := b.suites(ctx); err != nil {
			return nil, err
		}
		if err := b.baselines(ctx); err != nil {
			return nil, err
		}
	}
	if err := b.gvisor(ctx); err != nil {
		return nil, err
	}
	b.rep.Targets = b.targets()
	return b.rep, nil
}

// pooled measures the service with its warm pools: idle memory, print(1)
// and numpy.
func (b *bencher) pooled(ctx context.Context) error {
	b.progress("starting the service, filling the warm pools (basic %d, data_science %d)", b.cfg.PoolSize, b.cfg.DataPoolSize)
	svc, err := b.opts.NewService(b.cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	info := svc.Info()
	m := &b.rep.Machine
	m.Python = info.Isolation.PythonVersion
	iso := info.Isolation
	m.Isolation = fmt.Sprintf("backend %s, cgroup %s, Landlock ABI %d, seccomp %v, rootless %v", iso.Backend, iso.Cgroup, iso.LandlockABI, iso.Seccomp, iso.Rootless)
	if len(iso.Warnings) > 0 {
		m.Warnings = iso.Warnings
	}

	want := wantedPools(b.cfg)
	if err := waitFull(ctx, svc, want, b.opts.PoolTimeout); err != nil {
		return err
	}
	b.progress("measuring the idle memory of the pools")
	b.rep.Memory, b.rep.MemorySettled = settledMemory(ctx, want)

	// A few runs first: the first ones pay for cold page caches.
	for range 3 {
		_, _ = svc.Execute(ctx, sandbox.Request{Code: Print1Code})
	}
	print1 := sandbox.Request{Code: Print1Code}
	// No profile: an agent sends only code, and the data_science class
	// is found from the code's imports.
	numpy := sandbox.Request{Code: NumpyCode}
	nNumpy := max(1, b.n/2)
	// The warm cases wait, untimed, for a full pool before each run: the
	// latency of a run that finds a ready sandbox, whatever the refill
	// rate. The others run back to back, as a client would.
	refilled := func(ctx context.Context) error { return waitFull(ctx, svc, want, b.opts.PoolTimeout) }
	const numpyName = "numpy arange(10**6).sum()"
	cases := []struct {
		key, name string
		req       sandbox.Request
		class     string
		n, c      int
		check     func(*sandbox.Result) string
		warm      bool
	}{
		{"print1_sequential", "print(1)", print1, policy.Basic, b.n, 1, checkPrint1, false},
		{"print1_concurrent", "print(1)", print1, policy.Basic, 2 * b.n, b.clients, checkPrint1, false},
		{"print1_warm", "print(1), pool full each run", print1, policy.Basic, b.n, 1, checkPrint1, true},
		{"numpy_sequential", numpyName, numpy, policy.DataScience, nNumpy, 1, checkNumpy, false},
		{"numpy_concurrent", numpyName, numpy, policy.DataScience, 2 * nNumpy, b.clients, checkNumpy, false},
		{"numpy_warm", "numpy, pool full each run", numpy, policy.DataScience, nNumpy, 1, checkNumpy, true},
	}
	for _, c := range cases {
		if _, pooled := want[c.class]; c.warm && !pooled {
			b.rep.Rows = append(b.rep.Rows, Row{Key: c.key, Case: c.name, Clients: c.c, Skipped: "no " + c.class + " pool configured"})
			continue
		}
		if err := refilled(ctx); err != nil {
			return err
		}
		b.progress("%s: %d runs, %d client(s)", c.key, c.n, c.c)
		var before func(context.Context) error
		if c.warm {
			before = refilled
		}
		start := svc.PoolStats()[c.class]
		row := measureWith(ctx, c.key, c.name, c.n, c.c, before, execJob(svc, func(int) sandbox.Request { return c.req }, c.check))
		end := svc.PoolStats()[c.class]
		row.PoolHits, row.PoolMisses = end.Hits-start.Hits, end.Misses-start.Misses
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.warm {
			row.Throughput = 0 // the waits for the refill are not the service's throughput
			row.Notes = "latency only: each run waits, untimed, for a full pool"
		}
		b.rep.Rows = append(b.rep.Rows, row)
	}
	b.rep.Rows = append(b.rep.Rows, b.sessionRow(ctx, svc, "session_lifecycle", "session: create, 2 cells, close", false))
	return ctx.Err()
}

// suites runs the HumanEval and MBPP reference solutions from a service
// of their own, under the default policy: they are the code LLMs write, and
// it must run as it is.
func (b *bencher) suites(ctx context.Context) error {
	cases := []struct {
		key, name string
		tasks     []dataset.Task
		s         *Suite
	}{
		{"humaneval", "HumanEval", b.humanEval, &b.rep.HumanEval},
		{"mbpp", "MBPP", b.mbpp, &b.rep.MBPP},
	}
	cfg := b.cfg
	cfg.DataPoolSize = 0
	svc, err := b.opts.NewService(cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	want := wantedPools(cfg)
	for _, c := range cases {
		if len(c.tasks) == 0 {
			b.rep.Rows = append(b.rep.Rows, Row{Key: c.key, Case: c.name, Clients: b.clients, Skipped: c.s.Skipped})
			continue
		}
		if err := waitFull(ctx, svc, want, b.opts.PoolTimeout); err != nil {
			return err
		}
		b.progress("%s: %d problems, %d clients", c.name, len(c.tasks), b.clients)
		before := svc.PoolStats()[policy.Basic]
		row := b.runSuite(ctx, svc, c.key, c.name, c.tasks, c.s)
		after := svc.PoolStats()[policy.Basic]
		row.PoolHits, row.PoolMisses = after.Hits-before.Hits, after.Misses-before.Misses
		if err := ctx.Err(); err != nil {
			return err
		}
		b.rep.Rows = append(b.rep.Rows, row)
	}
	return nil
}

// baselines runs print(1) without codecage: the bare interpreter, and
// bwrap when it is installed and works here.
func (b *bencher) baselines(ctx context.Context) error {
	py := b.cfg.Interpreter
	bare := func(ctx context.Context, _ int) string { return runCommand(ctx, py, "-c", Print1Code) }
	for _, c := range []struct {
		key  string
		n, c int
	}{{"bare_python_sequential", b.n, 1}, {"bare_python_concurrent", 2 * b.n, b.clients}} {
		b.progress("%s: %d runs, %d client(s)", c.key, c.n, c.c)
		row := measure(ctx, c.key, "python3 -c print(1) (bare)", c.n, c.c, bare)
		if err := ctx.Err(); err != nil {
			return err
		}
		row.Notes = py
		b.rep.Rows = append(b.rep.Rows, row)
	}

	name := "bwrap python3 -c print(1)"
	bwrap, err := exec.LookPath("bwrap")
	skipped := ""
	if err != nil {
		skipped = "not installed"
	} else if msg := runCommand(ctx, bwrap, bwrapArgs(py)...); msg != "" {
		skipped = "does not run here: " + msg
	}
	if skipped != "" {
		b.rep.Rows = append(b.rep.Rows,
			Row{Key: "bwrap_sequential", Case: name, Clients: 1, Skipped: skipped},
			Row{Key: "bwrap_concurrent", Case: name, Clients: b.clients, Skipped: skipped})
		return nil
	}
	job := func(ctx context.Context, _ int) string { return runCommand(ctx, bwrap, bwrapArgs(py)...) }
	for _, c := range []struct {
		key  string
		n, c int
	}{{"bwrap_sequential", b.n, 1}, {"bwrap_concurrent", 2 * b.n, b.clients}} {
		b.progress("%s: %d runs, %d client(s)", c.key, c.n, c.c)
		row := measure(ctx, c.key, name, c.n, c.c, job)
		if err := ctx.Err(); err != nil {
			return err
		}
		row.Notes = "--unshare-all, /usr read-only"
		b.rep.Rows = append(b.rep.Rows, row)
	}
	return nil
}

func bwrapArgs(python string) []string {
	return []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", python, "-c", Print1Code}
}

// runCommand runs a print(1) command; it returns "" when it printed 1.
func runCommand(ctx context.Context, name string, args ...string) string {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return strings.TrimSpace(err.Error() + ": " + firstLine(stderr.String()))
	}
	if string(out) != "1\n" {
		return fmt.Sprintf("unexpected output %q", out)
	}
	return ""
}

// execJob runs req(i) through the service; a run fails when the service
// errs, the result is not a success, or check finds the output wrong.
func execJob(svc *sandbox.Service, req func(int) sandbox.Request, check func(*sandbox.Result) string) job {
	return func(ctx context.Context, i int) string {
		res, err := svc.Execute(ctx, req(i))
		if msg := describe(res, err); msg != "" {
			return msg
		}
		return check(res)
	}
}

// describe says why a run failed, or "" when it succeeded.
func describe(res *sandbox.Result, err error) string {
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

func checkPrint1(res *sandbox.Result) string {
	if res.Stdout != "1\n" {
		return fmt.Sprintf("stdout %q, want \"1\\n\"", res.Stdout)
	}
	return ""
}

func checkNumpy(res *sandbox.Result) string {
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
func waitFull(ctx context.Context, svc *sandbox.Service, want map[string]int, timeout time.Duration) error {
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

// targets judges the run against the project's goals.
func (b *bencher) targets() []Target {
	r := b.rep
	var out []Target

	seq, bare := r.Row("print1_sequential"), r.Row("bare_python_sequential")
	t := Target{Name: "print(1) p50 <= 1/4 of bare python p50"}
	if seq != nil && bare != nil && bare.P50 > 0 && seq.Runs > 0 {
		r.Print1OverBare = round3(seq.P50 / bare.P50)
		t.Measured = fmt.Sprintf("%.2f ms vs %.2f ms (ratio %.3f)", seq.P50, bare.P50, r.Print1OverBare)
		t.Met = seq.Errors == 0 && seq.P50*4 <= bare.P50
		if w := r.Row("print1_warm"); w != nil && w.Runs > 0 {
			t.Note = fmt.Sprintf("%.2f ms when the pool is full before each run", w.P50)
		}
	} else {
		t.Measured = "not measured"
	}
	out = append(out, t)

	conc := r.Row("print1_concurrent")
	t = Target{Name: ">= 300 print(1) runs/s with 8 clients"}
	if conc != nil && conc.Runs > 0 {
		t.Measured = fmt.Sprintf("%.0f runs/s with %d clients", conc.Throughput, conc.Clients)
		t.Met = conc.Errors == 0 && conc.Throughput >= 300 && conc.Clients >= 8
		if conc.Clients != 8 {
			t.Note = fmt.Sprintf("measured with %d clients, not 8", conc.Clients)
		}
	} else {
		t.Measured = "not measured"
	}
	out = append(out, t)

	np := r.Row("numpy_sequential")
	t = Target{Name: "numpy p50 < 10 ms"}
	if np != nil && np.Runs > 0 {
		t.Measured = fmt.Sprintf("%.2f ms", np.P50)
		t.Met = np.Errors == 0 && np.P50 < 10
		if w := r.Row("numpy_warm"); w != nil && w.Runs > 0 {
			t.Note = fmt.Sprintf("%.2f ms when the pool is full before each run", w.P50)
		}
	} else {
		t.Measured = "not measured"
	}
	out = append(out, t)

	out = append(out, suiteTarget("HumanEval 164/164", r.HumanEval, 164), suiteTarget("MBPP 974/974", r.MBPP, 974))
	return out
}

// suiteTarget: every problem of the set passes under the defaults.
func suiteTarget(name string, s Suite, size int) Target {
	t := Target{Name: name}
	if s.Skipped != "" {
		t.Measured = "not run: " + s.Skipped
		return t
	}
	t.Measured = fmt.Sprintf("%d/%d passed", s.Passed, s.Total)
	t.Met = s.Total > 0 && s.Passed == s.Total && s.Total >= size
	if s.Total < s.InFile {
		t.Note = fmt.Sprintf("only the first %d of %d problems ran", s.Total, s.InFile)
	}
	return t
}

func round3(f float64) float64 {
	return float64(int64(f*1000+0.5)) / 1000
}

// machine describes the host.
func machine(interpreter string) Machine {
	m := Machine{Cores: goruntime.NumCPU(), GoVersion: goruntime.Version(), Interpreter: interpreter}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemTotalBytes = kbField(b, "MemTotal:")
	}
	return m
}

// IsUnavailable reports whether err means this host cannot run sandboxes.
func IsUnavailable(err error) bool { return errors.Is(err, sandbox.ErrUnavailable) }
