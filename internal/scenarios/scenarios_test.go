package scenarios_test

// A scenario file, testdata/scenarios/NAME.txtar at the repository's root,
// reads as go-sdk's conformance files do: prose saying what the scenario
// checks and why, a -- request -- section in neutral form (the steps of
// request_test.go), then -- rest --, -- mcp -- and -- e2b --: each
// surface's answers to those steps, normalized (normalize_test.go). An
// optional -- surfaces -- section names the surfaces a scenario is played
// on (default all three), for a scenario a surface cannot play yet. The
// runner drives the three surfaces of one service on loopback, one
// scenario after the other, and compares; -update rewrites the answers.

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/httpapi"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/metrics"
	"github.com/codecage/codecage/internal/service"
)

var update = flag.Bool("update", false, "rewrite the surfaces' answers in testdata/scenarios/*.txtar")

func TestMain(m *testing.M) {
	jail.MaybeRunInit() // the test binary is re-executed as the sandbox init
	os.Exit(m.Run())
}

// The service's limit on a run, the same for every surface (E2B's
// /execute takes none of its own): short, so that the scenario of a
// limit takes seconds, and longer than idleWithin, so that a run a
// cancel failed to stop cannot pass for a freed slot.
const (
	runLimit   = 8 * time.Second
	idleWithin = 6 * time.Second
	// cancelWithin bounds how long a cancelling client waits for its
	// run's code to sleep (seen from the host) before it gives up anyway.
	cancelWithin = 10 * time.Second
)

// The API keys every surface accepts; steps name them by their owner.
var keys = map[string]string{"alice": "sk_alice_0123456789abcdef", "bob": "sk_bob_0123456789abcdef01"}

var surfaces = []string{"rest", "mcp", "e2b"}

// env is the one service and its two listeners.
type env struct {
	svc       *service.Service
	rest, e2b string // base URLs
	mcp       map[string]*mcp.ClientSession
}

func start(t *testing.T) *env {
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.EnvironmentsDir = filepath.Join(cfg.StateDir, "environments")
	commitEnvironment(t, cfg.EnvironmentsDir)
	cfg.PoolSize, cfg.SessionPoolSize, cfg.EnvPoolSize = 0, 0, 0 // sandboxes seen in /metrics are the scenario's own
	cfg.MachinePoolSize = 0
	cfg.Timeout, cfg.MaxTimeout = runLimit, runLimit
	cfg.AllowedCommands = append(cfg.AllowedCommands, "bash")  // as serve does with --e2b-listen
	cfg.Kernels = []string{"javascript", "typescript", "bash"} // likewise
	ks, err := access.ParseKeys("alice:" + keys["alice"] + ",bob:" + keys["bob"])
	if err != nil {
		t.Fatal(err)
	}
	// No rate per key: the scenarios pin the surfaces' answers, and a
	// suite that plays faster than 20 requests a second would otherwise
	// record a 429 wherever its burst runs out.
	cfg.RateLimit = 0
	cfg.ResolveCallerLimits(true)
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	m := metrics.New(svc)
	svc.SetObserver(m)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	streamable, sse := mcpserver.HTTPHandlers(svc, mcpserver.Options{Config: cfg, Log: log}, false)
	rest := httptest.NewServer(httpapi.New(svc, httpapi.Options{Keys: ks, Metrics: m, Log: log, MCP: streamable, MCPSSE: sse, Version: mcpserver.Version, Config: cfg}))
	t.Cleanup(rest.Close)
	e2bs := httptest.NewServer(e2b.New(svc, e2b.Options{Keys: ks, Metrics: m, Log: log, Config: cfg}))
	t.Cleanup(e2bs.Close)
	e := &env{svc: svc, rest: rest.URL, e2b: e2bs.URL, mcp: map[string]*mcp.ClientSession{}}
	t.Cleanup(func() {
		for _, cs := range e.mcp {
			_ = cs.Close()
		}
	})
	return e
}

func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "scenarios", "*.txtar"))
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata/scenarios")
	}
	e := start(t)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			a := parseArchive(b)
			steps, err := parseSteps(a.files["request"])
			if err != nil || len(steps) == 0 {
				t.Fatalf("-- request --: %v (no steps?)", err)
			}
			for _, on := range a.surfaces() {
				got := e.play(t, on, steps)
				switch {
				case *update:
					a.set(on, got)
				case a.files[on] != got:
					t.Errorf("%s answers differ from -- %s -- (run with -update if intended):\n--- got ---\n%s--- want ---\n%s", on, on, got, a.files[on])
				}
			}
			if *update {
				if err := os.WriteFile(file, a.format(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// play runs the steps on one surface and returns its answers, each under
// the step's line; the sessions it opened are closed after.
func (e *env) play(t *testing.T, on string, steps []step) string {
	p := &player{env: e, t: t, on: on, names: map[string]string{}, ids: map[string]string{}, tokens: map[string]string{}, boxes: map[string]string{},
		pids: map[string]uint32{}, streams: map[string]*openStream{}}
	defer p.closeAll()
	var out strings.Builder
	for _, st := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), runLimit+10*time.Second)
		out.WriteString("> " + st.line + "\n" + strings.TrimRight(p.do(ctx, st), "\n") + "\n")
		cancel()
	}
	return out.String()
}
