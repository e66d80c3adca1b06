package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// newService returns a service whose operator switched the import policy
// off (SANDBOX_ALLOWED_IMPORTS=*): the containment tests test the jail alone.
func newService(tb testing.TB) *service.Service {
	tb.Helper()
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.MemoryLimit = 256 << 20
	return newServiceWith(tb, cfg)
}

// newPolicyService returns a service with the default configuration: the
// basic profile's import policy applies.
func newPolicyService(tb testing.TB) *service.Service {
	tb.Helper()
	return newServiceWith(tb, service.LeanTestConfig())
}

// services are the services of the running test: their warm pools are
// closed before a leftover check and when the test ends.
var services struct {
	sync.Mutex
	list []*service.Service
}

func newServiceWith(tb testing.TB, cfg config.Config) *service.Service {
	tb.Helper()
	cfg.Isolation = testBackend(tb)
	applyTestEnvironment(tb, &cfg)
	return newServiceAsIs(tb, cfg)
}

// newServiceAsIs keeps cfg's backend whatever the suite runs against.
func newServiceAsIs(tb testing.TB, cfg config.Config) *service.Service {
	tb.Helper()
	return newServiceOpts(tb, cfg, nil)
}

// newServiceOpts is newServiceAsIs with the service's options.
func newServiceOpts(tb testing.TB, cfg config.Config, opts *service.Options) *service.Service {
	tb.Helper()
	svc, err := service.New(cfg, opts)
	if err != nil {
		tb.Fatalf("service.New: %v", err)
	}
	services.Lock()
	services.list = append(services.list, svc)
	services.Unlock()
	tb.Cleanup(closeServices)
	return svc
}

// testBackend is the backend the suite runs against: native, or gvisor
// when CODECAGE_TEST_BACKEND=gvisor (scripts/test.sh runs the functional
// and containment tests both ways). Without a working runsc that fails.
func testBackend(tb testing.TB) string {
	b := os.Getenv("CODECAGE_TEST_BACKEND")
	switch b {
	case "", config.IsolationNative:
		return config.IsolationNative
	case config.IsolationGVisor:
		if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
			tb.Fatalf("CODECAGE_TEST_BACKEND=gvisor, but gVisor does not work here: %s", info.Error)
		}
		return b
	}
	tb.Fatalf("CODECAGE_TEST_BACKEND=%q: want native or gvisor", b)
	return ""
}

func closeServices() {
	services.Lock()
	list := services.list
	services.list = nil
	services.Unlock()
	for _, s := range list {
		s.Close()
	}
}

// run executes code with the import policy off (the jail alone is tested)
// and fails the test if the service itself errs.
func run(t *testing.T, svc *service.Service, code string, opts ...func(*service.Request)) *service.Result {
	t.Helper()
	req := service.Request{Code: code, AllowedImports: []string{"*"}, Timeout: 20 * time.Second}
	for _, o := range opts {
		o(&req)
	}
	if machineRootMode() {
		return runAsMachineRoot(t, svc, req)
	}
	res, err := svc.Execute(context.Background(), req)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res
}

func withTimeout(d time.Duration) func(*service.Request) {
	return func(r *service.Request) { r.Timeout = d }
}

func withMemory(n int64) func(*service.Request) {
	return func(r *service.Request) { r.MemoryBytes = n }
}

func withOutput(n int64) func(*service.Request) {
	return func(r *service.Request) { r.OutputBytes = n }
}

func withCPU(d time.Duration) func(*service.Request) {
	return func(r *service.Request) { r.CPUTime = d }
}

// mustSucceed fails the test unless the run succeeded; it returns stdout.
func mustSucceed(t *testing.T, res *service.Result) string {
	t.Helper()
	if !res.Success {
		t.Fatalf("run failed: error=%+v exit=%d limit=%v\nstdout=%q\nstderr=%q", res.Error, res.ExitCode, res.Limit, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// sandboxProcesses lists host processes that run as a sandbox uid of this
// process (root mode gives every sandbox a uid of a block it leased).
func sandboxProcesses(t *testing.T) []string {
	t.Helper()
	return leftovers.SandboxProcesses()
}

// sandboxCgroups lists the sandbox cgroups left behind under this
// process's own cgroups (where the jail creates them).
func sandboxCgroups(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			if ctrl == "" {
				ctrl = "." // v2
			}
			// The jail names a sandbox's cgroup "<supervisor pid>-<id>": this
			// process's own, not those of another codecage on the host.
			matches, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", ctrl, parts[2], "codecage", strconv.Itoa(os.Getpid())+"-*"))
			for _, m := range matches {
				if fi, err := os.Stat(m); err == nil && fi.IsDir() {
					found = append(found, m)
				}
			}
		}
	}
	return found
}

// assertNoLeftovers fails when any sandbox process or cgroup survives.
// The kernel finishes tearing down a pid namespace asynchronously, so it
// waits for them to go (on a slow or loaded host that takes a while)
// before it decides.
func assertNoLeftovers(t *testing.T) {
	t.Helper()
	closeServices() // ready sandboxes of a warm pool are not leftovers
	var procs, cgs []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, cgs = sandboxProcesses(t), sandboxCgroups(t)
		if len(procs) == 0 && len(cgs) == 0 {
			return
		}
	}
	t.Fatalf("left behind: processes %v, cgroups %v", procs, cgs)
}
