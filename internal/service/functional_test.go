package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/service"
)

func TestStdoutAndStderrAreSeparate(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
	if mustSucceed(t, res) != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("stdout=%q stderr=%q", res.Stdout, res.Stderr)
	}
}

func TestLastExpressionResult(t *testing.T) {
	svc := newService(t)
	cases := []struct{ code, want, typ string }{
		{"2 + 2", "4", "int"},
		{"x = 'hé'\nx", `"hé"`, "str"},
		{"[1, {'a': None}]", `[1,{"a":null}]`, "list"},
		{"{1, 2}", `"{1, 2}"`, "set"}, // not JSON: its repr
		{"float('nan')", `"nan"`, "float"},
		{"class A:\n    def __repr__(self): return 'A!'\nA()", `"A!"`, "A"},
	}
	for _, c := range cases {
		res := run(t, svc, c.code)
		mustSucceed(t, res)
		if got := compactJSON(t, res.Result); got != c.want {
			t.Errorf("%q: result %s, want %s", c.code, got, c.want)
		}
		if res.ResultType == nil || *res.ResultType != c.typ {
			t.Errorf("%q: result_type %v, want %s", c.code, res.ResultType, c.typ)
		}
	}
	for _, code := range []string{"print(1)", "x = 1", "None", ""} {
		res := run(t, svc, code)
		mustSucceed(t, res)
		if string(res.Result) != "null" {
			t.Errorf("%q: result %s, want null", code, res.Result)
		}
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("result %q is not JSON: %v", raw, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestVariables(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "import math\na = 1\n_hidden = 2\ndef f(): pass\nclass K: pass\nb = a + 1")
	mustSucceed(t, res)
	if got := strings.Join(res.Variables, ","); got != "a,f,K,b" {
		t.Fatalf("variables %v, want a,f,K,b (no modules, no _names)", res.Variables)
	}
}

func TestExceptionShowsOnlyUserFrames(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "def f(x):\n    return 1 / x\n\nf(0)")
	if res.Success || res.Error == nil {
		t.Fatalf("expected failure, got %+v", res)
	}
	e := res.Error
	if e.Type != "ZeroDivisionError" || e.Message != "division by zero" {
		t.Fatalf("error %+v", e)
	}
	if e.Line == nil || *e.Line != 2 {
		t.Fatalf("line %v, want 2", e.Line)
	}
	for _, want := range []string{`File "<code>", line 4, in <module>`, `File "<code>", line 2, in f`, "return 1 / x", "ZeroDivisionError: division by zero"} {
		if !strings.Contains(e.Traceback, want) {
			t.Errorf("traceback lacks %q:\n%s", want, e.Traceback)
		}
	}
	for _, leak := range []string{"harness", "_run", "-c"} {
		if strings.Contains(e.Traceback, leak) {
			t.Errorf("traceback shows harness internals (%q):\n%s", leak, e.Traceback)
		}
	}
	if res.ExitCode != 1 {
		t.Errorf("exit code %d, want 1", res.ExitCode)
	}
}

func TestSyntaxErrorHasLineAndColumn(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "x = 1\ny = (2 +\nprint(x")
	if res.Error == nil || res.Error.Type != "SyntaxError" {
		t.Fatalf("error %+v", res.Error)
	}
	if res.Error.Line == nil || res.Error.Column == nil || *res.Error.Line < 2 {
		t.Fatalf("line/column missing: %+v", res.Error)
	}
	res = run(t, svc, "def f(:\n  pass")
	if res.Error == nil || *res.Error.Line != 1 || *res.Error.Column != 7 {
		t.Fatalf("want line 1 column 7: %+v", res.Error)
	}
}

func TestUnicodeAndInvalidUTF8Output(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, `import sys
print("héllo ✓ 日本 🎉")
sys.stdout.flush()
sys.stdout.buffer.write(b"bad:\xff\xfe:end\n")
sys.stderr.buffer.write(b"\xc3(\n")`)
	out := mustSucceed(t, res)
	if !strings.HasPrefix(out, "héllo ✓ 日本 🎉\n") {
		t.Fatalf("unicode lost: %q", out)
	}
	if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) {
		t.Fatalf("output is not valid UTF-8: %q %q", res.Stdout, res.Stderr)
	}
	// Each run of invalid bytes becomes one U+FFFD.
	if !strings.Contains(out, "bad:\uFFFD:end") {
		t.Fatalf("invalid bytes not replaced: %q", out)
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatal(err)
	}
}

func TestNULBytesInCode(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "print(1)\x00print(2)")
	if res.Success || res.Error == nil || res.Error.Type != "SyntaxError" || !strings.Contains(res.Error.Message, "null bytes") {
		t.Fatalf("want a SyntaxError about null bytes, got %+v", res.Error)
	}
	// Inside a string literal written as an escape, NUL is fine.
	res = run(t, svc, `print(len("a\x00b"))`)
	if mustSucceed(t, res) != "3\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func TestOneMegabyteOfCode(t *testing.T) {
	svc := newService(t)
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "v%d = %d\n", i%1000, i)
	}
	b.WriteString("print(v999)")
	res := run(t, svc, b.String())
	if out := mustSucceed(t, res); out == "" {
		t.Fatal("no output")
	}
}

func TestBadRequestsAreRejectedClearly(t *testing.T) {
	svc := newService(t)
	ctx := context.Background()
	cases := map[string]service.Request{
		"invalid utf-8":    {Code: "print('\xff')"},
		"huge code":        {Code: strings.Repeat("#", 5<<20)},
		"negative timeout": {Code: "1", Timeout: -time.Second},
		"absurd timeout":   {Code: "1", Timeout: 1000 * time.Hour},
		"absurd memory":    {Code: "1", MemoryBytes: 1 << 50},
		"tiny memory":      {Code: "1", MemoryBytes: 1},
		"negative output":  {Code: "1", OutputBytes: -5},
	}
	for name, req := range cases {
		res, err := svc.Execute(ctx, req)
		if !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("%s: err %v res %+v, want ErrInvalidRequest", name, err, res)
			continue
		}
		if len(err.Error()) < 20 {
			t.Errorf("%s: error too terse: %q", name, err)
		}
	}
}

func TestWallClockTimeout(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "print('started', flush=True)\nwhile True: pass", withTimeout(time.Second))
	if !res.TimedOut || res.Limit == nil || *res.Limit != "timeout" || res.Success {
		t.Fatalf("want timeout: %+v", res)
	}
	if res.Stdout != "started\n" {
		t.Fatalf("output before the kill was lost: %q", res.Stdout)
	}
	if res.Error == nil || res.Error.Type != "TimeoutError" {
		t.Fatalf("error %+v", res.Error)
	}
}

func TestCPUTimeLimit(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "while True: pass", withCPU(time.Second), withTimeout(30*time.Second))
	if res.Limit == nil || *res.Limit != "cpu_time" || res.TimedOut {
		t.Fatalf("want cpu_time limit: limit=%v timed_out=%v error=%+v", res.Limit, res.TimedOut, res.Error)
	}
}

func TestOOMIsReported(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "x = []\nwhile True: x.append(bytearray(1 << 20))", withMemory(48<<20))
	if res.Limit == nil || *res.Limit != "memory" || res.Success {
		t.Fatalf("want memory limit: %+v", res)
	}
	if res.Isolation.Cgroup != "none" && !res.OOMKilled {
		t.Fatalf("with a memory cgroup the kill must be reported as oom_killed: %+v", res)
	}
	if res.Error == nil || res.Error.Type != "MemoryError" {
		t.Fatalf("error %+v", res.Error)
	}
}

func TestOutputTruncation(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "print('x' * 100000)\nprint('never')", withOutput(1000))
	if !res.Truncated || len(res.Stdout) != 1000 || res.Limit == nil || *res.Limit != "output" {
		t.Fatalf("truncated=%v len=%d limit=%v", res.Truncated, len(res.Stdout), res.Limit)
	}
}

func TestSysExit(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "import sys\nprint('bye')\nsys.exit(3)")
	if res.Success || res.ExitCode != 3 || res.Stdout != "bye\n" {
		t.Fatalf("exit 3: %+v", res)
	}
	res = run(t, svc, "raise SystemExit")
	mustSucceed(t, res)
	res = run(t, svc, "import os\nos._exit(7)")
	if res.Success || res.ExitCode != 7 || res.Error == nil {
		t.Fatalf("os._exit(7): %+v", res)
	}
}

func TestImportPolicy(t *testing.T) {
	svc := newPolicyService(t)
	res, err := svc.Execute(context.Background(), service.Request{Code: "import math\nimport os"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Type != "ImportError" || !strings.Contains(res.Error.Message, "Import of 'os' is not allowed") {
		t.Fatalf("error %+v", res.Error)
	}
	// The standard library's own imports are not the user's.
	res, err = svc.Execute(context.Background(), service.Request{Code: "import json, random\njson.dumps(random.Random(1).random())"})
	if err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, res)
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{"importlib"}
	res, err = newServiceWith(t, cfg).Execute(context.Background(), service.Request{Code: "import importlib\nimportlib.import_module('subprocess')"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Type != "ImportError" {
		t.Fatalf("import_module bypassed the policy: %+v", res)
	}
}

func TestResultReportsIsolation(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "1")
	iso := res.Isolation
	if !iso.Seccomp || res.Backend != testBackend(t) || res.ExecutionID == "" {
		t.Fatalf("isolation %+v backend %q id %q", iso, res.Backend, res.ExecutionID)
	}
	if (iso.Cgroup == "none" || iso.LandlockABI == 0 && !onGVisor()) && len(iso.Warnings) == 0 {
		t.Fatalf("a missing layer must be reported: %+v", iso)
	}
	if res.Resources.PeakMemoryBytes <= 0 || res.Resources.CPUTimeSeconds <= 0 || res.ExecutionTime <= 0 {
		t.Fatalf("resources %+v time %v", res.Resources, res.ExecutionTime)
	}
}

// Two executions at once see nothing of each other: files, processes, IPC.
func TestConcurrentExecutionsAreIsolated(t *testing.T) {
	svc := newService(t)
	const marker = "codecage-concurrent-marker"
	// The writer makes its files and its process, says so, and waits to
	// be canceled; the reader looks only once the writer has said so, and
	// while it still runs (the writer's cancel comes after the reader's
	// answer), however long either took to start.
	writer := `import os, time, subprocess
open("/tmp/` + marker + `", "w").write("x")
open("/workspace/` + marker + `", "w").write("x")
p = subprocess.Popen(["/bin/sleep", "60"])
open("/tmp/ready", "w").write(str(p.pid))
print("writer ready", flush=True)
time.sleep(60)`
	reader := `import os
seen = []
for d in ("/tmp", "/workspace", "/dev/shm"):
    seen += os.listdir(d)
cmds = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            cmds.append(open("/proc/%s/cmdline" % pid, "rb").read())
        except OSError:
            pass
print("seen", seen)
print("sleep-visible", any(b"sleep" in c for c in cmds))`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	var once sync.Once
	wrote := make(chan *service.Result, 1)
	go func() {
		res, err := svc.Execute(ctx, service.Request{Code: writer, AllowedImports: []string{"*"}, Timeout: 90 * time.Second,
			OnOutput: func(_, line string) {
				if strings.HasPrefix(line, "writer ready") {
					once.Do(func() { close(ready) })
				}
			}})
		if err != nil {
			t.Error(err)
		}
		wrote <- res
	}()
	select {
	case <-ready:
	case res := <-wrote:
		t.Fatalf("the writer ended before it was ready: %+v", res)
	case <-time.After(60 * time.Second):
		t.Fatal("the writer was not ready within 60 s")
	}
	read, err := svc.Execute(context.Background(), service.Request{Code: reader, AllowedImports: []string{"*"}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-wrote:
		t.Fatalf("the writer ended while the reader looked: %+v", res)
	default:
	}
	cancel()
	if res := <-wrote; res == nil || res.Limit == nil || *res.Limit != "canceled" || !strings.Contains(res.Stdout, "writer ready") {
		t.Fatalf("writer: %+v", res)
	}
	out := mustSucceed(t, read)
	if strings.Contains(out, marker) || strings.Contains(out, "ready") || !strings.Contains(out, "seen []") {
		t.Fatalf("reader saw the writer's files: %q", out)
	}
	if !strings.Contains(out, "sleep-visible False") {
		t.Fatalf("reader saw the writer's processes: %q", out)
	}
}

func TestCancellationKillsTheSandbox(t *testing.T) {
	svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Canceled once the code runs (its line has come), however long the
	// sandbox took to get there.
	res, err := svc.Execute(ctx, service.Request{Code: "import time\nprint('up', flush=True)\ntime.sleep(60)",
		OnOutput: func(_, line string) {
			if strings.HasPrefix(line, "up") {
				cancel()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Limit == nil || *res.Limit != "canceled" || res.Success || res.ExecutionTime > 10 {
		t.Fatalf("want a canceled run: %+v", res)
	}
	assertNoLeftovers(t)
}

func TestDeadlineFromContextIsATimeout(t *testing.T) {
	svc := newService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := svc.Execute(ctx, service.Request{Code: "while True: pass"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut {
		t.Fatalf("want timed_out: %+v", res)
	}
}

// The code shares a process with the harness and can write anything to
// its channel; the supervisor must stay correct and bounded.
func TestForgedAndHugeRepliesAreBounded(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, "import os\nos.write(3, b'\\xff\\xff\\xff\\xff garbage')\nos._exit(0)")
	if res.Result == nil || string(res.Result) != "null" {
		t.Fatalf("forged frame leaked into the result: %s", res.Result)
	}
	res = run(t, svc, "g = globals()\nfor i in range(100000): g['v%d' % i] = i\nraise ValueError('m' * 10**7)")
	if res.Error == nil || res.Error.Type != "ValueError" || len(res.Error.Message) > 70000 || len(res.Variables) > 1000 {
		t.Fatalf("error %d bytes, %d variables", len(res.Error.Message), len(res.Variables))
	}
	res = run(t, svc, "'r' * 10**7")
	if s := string(res.Result); len(s) > 70000 || !strings.Contains(s, "truncated") {
		t.Fatalf("result of %d bytes", len(s))
	}
}

// /proc holds the sandbox's processes and none of the host-wide files
// (subset=pid), and the data science stack still imports and runs.
func TestProcHasWhatLibrariesNeedAndNoMore(t *testing.T) {
	svc := newService(t)
	res := run(t, svc, `import os
out = {}
for p in ("/proc/stat", "/proc/meminfo", "/proc/cpuinfo", "/proc/self/status",
          "/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/kcore", "/proc/keys", "/proc/timer_list"):
    try:
        open(p).read(1)
        out[p] = "read"
    except OSError as e:
        out[p] = "denied"
out`)
	// subset=pid: the host-wide files are gone; the libraries that read
	// them find what they need elsewhere (the sklearn import below).
	// gVisor's /proc is its own kernel's: these three describe the sandbox.
	hostWide := "denied"
	if onGVisor() {
		hostWide = "read"
	}
	want := `{"/proc/stat":"` + hostWide + `","/proc/meminfo":"` + hostWide + `","/proc/cpuinfo":"` + hostWide + `","/proc/self/status":"read",` +
		`"/proc/sys/kernel/core_pattern":"denied","/proc/sysrq-trigger":"denied","/proc/kcore":"denied","/proc/keys":"denied","/proc/timer_list":"denied"}`
	if got := compactJSON(t, res.Result); got != compactJSON(t, json.RawMessage(want)) {
		t.Fatalf("got %s", got)
	}
	res = execute(t, allProfilesService(t), service.Request{Profiles: []string{"data_science"}, Code: "import sklearn, scipy.stats"})
	if !res.Success || res.Stderr != "" {
		t.Fatalf("sklearn import: %+v stderr %q", res.Error, res.Stderr)
	}
}
