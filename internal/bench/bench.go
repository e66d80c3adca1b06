// Package bench measures the sandbox service the way a user meets it: the
// latency and throughput of stateless runs from warm pools, sequential and
// from concurrent clients, the HumanEval and MBPP reference solutions
// under the default policy, the idle
// memory of a pooled sandbox, and the same print(1) as a bare interpreter
// (and under bwrap, when installed) for comparison.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/dataset"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
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
	// NewService starts a service (default service.New).
	NewService func(config.Config) (*service.Service, error)
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
	// EnvOnly measures the environment rows alone (EnvKeys);
	// SkipEnvironments leaves them out.
	EnvOnly          bool
	SkipEnvironments bool
	// SuitesOnly runs HumanEval and MBPP alone (a check of a host or of a
	// problem file, without the latency rows).
	SuitesOnly bool
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
	// EnvZygotes is the memory of the zygotes, the default classes' and
	// the environments', after the environment rows' warm runs.
	EnvZygotes []ZygoteMemory `json:"environment_zygotes,omitempty"`
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
		opts.NewService = func(cfg config.Config) (*service.Service, error) { return service.New(cfg, nil) }
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
	if b.opts.SuitesOnly {
		if err := b.suites(ctx); err != nil {
			return nil, err
		}
		b.rep.Targets = b.targets()
		return b.rep, nil
	}
	if b.opts.EnvOnly {
		if err := b.environments(ctx); err != nil {
			return nil, err
		}
		b.rep.Targets = b.targets()
		return b.rep, nil
	}
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
		if !b.opts.SkipEnvironments {
			if err := b.environments(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := b.gvisor(ctx); err != nil {
		return nil, err
	}
	b.rep.Targets = b.targets()
	return b.rep, nil
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
func IsUnavailable(err error) bool { return errors.Is(err, service.ErrUnavailable) }
