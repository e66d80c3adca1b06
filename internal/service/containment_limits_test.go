package service_test

import (
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// --- Resources ---------------------------------------------------------------

func TestContainment_14_ForkBomb(t *testing.T) {
	svc := newService(t)
	start := time.Now()
	res := run(t, svc, pyPrelude+`
main = os.getpid()
reported = False
while True:
    try:
        os.fork()
    except OSError as e:
        if os.getpid() == main and not reported:
            reported = True
            R("fork_error", ename(e.errno))
            R("procs", sum(1 for p in os.listdir("/proc") if p.isdigit()))
`, withTimeout(15*time.Second)) // the copies spin: on a loaded host (gVisor forks slowly) the first needs time to count
	logResult(t, res)
	elapsed := time.Since(start)
	if elapsed > 60*time.Second {
		t.Errorf("fork bomb run took %v with a 15 s timeout", elapsed)
	}
	// The bomb never stops on its own: the run ends at the wall-clock limit
	// (or, should the copies exhaust memory first, at the memory limit).
	if res.Limit == nil || (*res.Limit != "timeout" && *res.Limit != "memory") {
		t.Errorf("fork bomb: want it ended by the timeout, got error=%+v limit=%v", res.Error, res.Limit)
	}
	m := results(res)
	if onGVisor() && res.Limit != nil && *res.Limit == "memory" {
		// Each gVisor process costs its kernel ~5 MiB (a ptrace stub and
		// task state), so 64 copies outgrow 256 MiB before RLIMIT_NPROC
		// stops them, and the memory kill takes the output with it.
		t.Logf("gVisor: the memory limit ended the fork bomb first")
		expectResponsive(t, svc)
		assertNoLeftovers(t)
		return
	}
	expectOneOf(t, m, "fork_error", "EAGAIN")
	// The program may run jail.DefaultLimits.MaxProcesses (64) processes at
	// once; "procs" also counts the init (PID 1), which is not the program's.
	n, err := strconv.Atoi(m["procs"])
	if err != nil {
		t.Fatalf("no process count: %q", m["procs"])
	}
	limit := jail.DefaultLimits.MaxProcesses
	if machineRootMode() {
		// A machine's RLIMIT_NPROC leaves room for its init's threads,
		// which run as the user, not as root; root's processes may take
		// that room. The bound over all of them is the cgroup's pids.max:
		// MaxProcesses plus the margin of the init's threads.
		limit += jail.MachineThreads
	}
	if n-1 > limit {
		t.Errorf("the fork bomb ran %d processes at once, the process limit is %d "+
			"(pids.max and RLIMIT_NPROC are MaxProcesses+16 for the init's threads, but the init uses only a few)", n-1, limit)
	}
	expectResponsive(t, svc)
	assertNoLeftovers(t)
}

func TestContainment_15_MemoryBomb(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, `
chunks = []
while True:
    chunks.append(b"\x01" * (1 << 20))
`, withMemory(64<<20), withTimeout(30*time.Second))
	logResult(t, res)
	if !res.OOMKilled && (res.Limit == nil || *res.Limit != "memory") {
		t.Errorf("memory bomb: want OOMKilled or limit memory, got oom=%v limit=%v error=%+v timedOut=%v", res.OOMKilled, res.Limit, res.Error, res.TimedOut)
	}
	if res.Success {
		t.Error("memory bomb reported success")
	}
	expectResponsive(t, svc)
}

const spinIgnoringSignals = `
import signal
for s in (signal.SIGALRM, signal.SIGXCPU, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGVTALRM, signal.SIGPROF):
    signal.signal(s, signal.SIG_IGN)
print("spinning", flush=True)
while True:
    pass
`

func TestContainment_16_CPUSpin(t *testing.T) {
	svc := newService(t)
	t.Run("wall_clock", func(t *testing.T) {
		start := time.Now()
		res := run(t, svc, spinIgnoringSignals, withTimeout(2*time.Second), withCPU(60*time.Second))
		logResult(t, res)
		// The run's own time is the limit's; the call's also holds the
		// sandbox's start, which a loaded host (gVisor's most) stretches.
		if res.ExecutionTime > 8 {
			t.Errorf("the run lasted %.1f s with a 2 s timeout", res.ExecutionTime)
		}
		if d := time.Since(start); d > 60*time.Second {
			t.Errorf("the call took %v with a 2 s timeout", d)
		}
		if !res.TimedOut || res.Limit == nil || *res.Limit != "timeout" {
			t.Errorf("want TimedOut and limit timeout, got timedOut=%v limit=%v error=%+v", res.TimedOut, res.Limit, res.Error)
		}
		if !strings.Contains(res.Stdout, "spinning") {
			t.Errorf("the spin never started: stdout=%q stderr=%q", res.Stdout, res.Stderr)
		}
	})
	t.Run("cpu_time", func(t *testing.T) {
		if machineRootMode() {
			machineSpinIsBounded(t)
			return
		}
		start := time.Now()
		// The wall-clock limit is far: on a loaded host a second of CPU
		// takes many seconds to come.
		res := run(t, svc, spinIgnoringSignals, withTimeout(60*time.Second), withCPU(time.Second))
		logResult(t, res)
		if d := time.Since(start); d > 75*time.Second {
			t.Errorf("run took %v with a 1 s CPU limit", d)
		}
		if res.Limit == nil || *res.Limit != "cpu_time" || res.TimedOut {
			t.Errorf("want limit cpu_time, got timedOut=%v limit=%v error=%+v", res.TimedOut, res.Limit, res.Error)
		}
	})
	expectResponsive(t, svc)
}

func TestContainment_17_SleepForever(t *testing.T) {
	svc := newService(t)
	start := time.Now()
	res := run(t, svc, "import time\ntime.sleep(10**6)\n", withTimeout(2*time.Second))
	logResult(t, res)
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("run took %v with a 2 s timeout", d)
	}
	if !res.TimedOut || res.Limit == nil || *res.Limit != "timeout" {
		t.Errorf("want TimedOut and limit timeout, got timedOut=%v limit=%v error=%+v", res.TimedOut, res.Limit, res.Error)
	}
}

func TestContainment_18_OutputFlood(t *testing.T) {
	svc := newService(t)
	const limit = 1 << 20
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := run(t, svc, `
import sys
chunk = b"A" * 1000 + b"\xff\xfe" + b"\x1b[2J\x1b]0;x\x07" + b"\n"
out = sys.stdout.buffer
for i in range(50_000_000 // len(chunk) + 1):
    out.write(chunk)
out.flush()
print("flood finished", file=sys.stderr)
`, withOutput(limit), withTimeout(30*time.Second))
	logResult(t, res)
	if !res.Truncated {
		t.Errorf("want Truncated, got limit=%v error=%+v", res.Limit, res.Error)
	}
	if res.Limit == nil || *res.Limit != "output" {
		t.Errorf("want limit output, got %v", res.Limit)
	}
	// Each "\xff\xfe" (2 bytes) becomes one U+FFFD (3 bytes): one extra
	// byte per 1014-byte line, well under limit/512.
	if n := len(res.Stdout); n > limit+limit/512 {
		t.Errorf("stdout is %d bytes, the limit is %d", n, limit)
	} else if n < limit/2 {
		t.Errorf("stdout is only %d bytes: the output before the limit was lost", n)
	}
	if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) {
		t.Error("stdout or stderr is not valid UTF-8")
	}
	if strings.Contains(res.Stderr, "flood finished") {
		t.Error("the flood ran to completion: it was not stopped at the output limit")
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("json.Marshal(result): %v", err)
	}
	if !json.Valid(b) {
		t.Fatal("the encoded result is not valid JSON")
	}
	var back service.Result
	if err := json.Unmarshal(b, &back); err != nil || back.Stdout != res.Stdout {
		t.Fatalf("the result does not round-trip through JSON: %v", err)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 64<<20 {
		t.Errorf("the test process heap grew by %d MiB after a 50 MB flood", grow>>20)
	}
	runtime.KeepAlive(res)
}

const fillSnippet = `
chunk = b"\x01" * (1 << 20)
def fill(d):
    total = 0
    for i in range(1000):
        fd = os.open("%s/fill%d" % (d, i), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for j in range(8):
                total += os.write(fd, chunk)
        except OSError as e:
            return ename(e.errno), total
        finally:
            os.close(fd)
    return "none", total
err, total = fill("@@DIR@@")
R("errno", err)
R("mib", total >> 20)
`

func TestContainment_19_FillTmp(t *testing.T) {
	svc := newService(t)
	for _, dir := range []string{"/tmp", "/dev/shm"} {
		t.Run(strings.ReplaceAll(dir[1:], "/", "_"), func(t *testing.T) {
			m := probe(t, svc, fill(fillSnippet, "DIR", dir))
			expectOneOf(t, m, "errno", "ENOSPC")
			// The tmpfs is 64 MiB.
			if n, err := strconv.Atoi(m["mib"]); err != nil || n > 64 || n < 32 {
				t.Errorf("wrote %q MiB into %s before ENOSPC, want about 64", m["mib"], dir)
			}
		})
	}
}

func TestContainment_20_GiantWorkspaceFile(t *testing.T) {
	svc := newService(t)
	m := probe(t, svc, `
chunk = b"\x01" * (1 << 20)
total = 0
fd = os.open("/workspace/giant", os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while total < (1 << 30):
        total += os.write(fd, chunk)
    R("errno", "none")
except OSError as e:
    R("errno", ename(e.errno))
R("mib", total >> 20)
`)
	expectOneOf(t, m, "errno", "EFBIG", "ENOSPC")
	if n, err := strconv.Atoi(m["mib"]); err != nil || n > 64 {
		t.Errorf("wrote %q MiB into one workspace file, the limits are 64 MiB", m["mib"])
	}
}

// machineSpinIsBounded is row 16's CPU row for a machine's command, which
// has no CPU-time limit of its own (as on E2B: its processes may live on
// for the session's life). What bounds it is the session's CPU bandwidth,
// judged from the host on the machine's cgroup while two threads spin.
func machineSpinIsBounded(t *testing.T) {
	h := findHostCgroups(t)
	const cores = 0.5
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.CPULimit, cfg.IdleCPU = cores, 0.05
	svc := newServiceWith(t, cfg)
	var res *service.Result
	name, use := h.sampleWhile(t, func() { res = run(t, svc, fill(spinThreads, "SECS", "3"), withTimeout(60*time.Second)) })
	mustSucceed(t, res)
	t.Logf("machine cgroup %s: %.2fs of CPU in %.2fs seen from the host (%.2f cores), quota %.2f",
		name, (use.last - use.first).Seconds(), use.lastT.Sub(use.firstT).Seconds(), use.cores(), use.quota)
	if name == "" || use.lastT.Sub(use.firstT) < 2*time.Second {
		t.Fatalf("the machine's cgroup was not seen from the host for long enough (%q, %v)", name, use.lastT.Sub(use.firstT))
	}
	if use.quota < cores*0.99 || use.quota > cores*1.01 {
		t.Errorf("the machine's cgroup has a CPU bandwidth of %g cores while its command runs, want SANDBOX_CPU_LIMIT=%g", use.quota, cores)
	}
	if use.cores() > cores*1.25 {
		t.Errorf("two spinning threads used %.2f cores, above SANDBOX_CPU_LIMIT=%g", use.cores(), cores)
	}
}
