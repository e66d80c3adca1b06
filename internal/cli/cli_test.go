package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/leftovers"
)

// cliMainEnv makes the test binary run the command line itself, so tests
// can start `codecage mcp` as a real process.
const cliMainEnv = "CODECAGE_TEST_CLI_MAIN"

func TestMain(m *testing.M) {
	jail.MaybeRunInit()
	if os.Getenv(cliMainEnv) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func cli(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunPrintsFromInsideTheJail(t *testing.T) {
	code, out, errOut := cli(t, "", "run", "-c", "print(2+2)")
	if code != 0 || out != "4\n" || errOut != "" {
		t.Fatalf("code=%d stdout=%q stderr=%q", code, out, errOut)
	}
	// A final expression is shown like a REPL would.
	code, out, _ = cli(t, "", "run", "--code", "6*7")
	if code != 0 || out != "42\n" {
		t.Fatalf("code=%d stdout=%q", code, out)
	}
}

func TestRunJSONObject(t *testing.T) {
	code, out, _ := cli(t, "", "run", "--json", "-c", "import math\nx = 1\nmath.sqrt(16)")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"success", "execution_id", "stdout", "stderr", "result", "variables", "exit_code", "error",
		"execution_time", "timed_out", "oom_killed", "truncated", "limit", "resources", "backend"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("missing key %q", k)
		}
	}
	if string(obj["result"]) != "4.0" || string(obj["backend"]) != `"native"` || string(obj["error"]) != "null" || string(obj["limit"]) != "null" {
		t.Fatalf("object: %s", out)
	}
	var res struct {
		Resources map[string]float64 `json:"resources"`
	}
	_ = json.Unmarshal([]byte(out), &res)
	if _, ok := res.Resources["peak_memory_bytes"]; !ok {
		t.Fatalf("resources: %v", res.Resources)
	}
}

func TestRunFromFileAndStdin(t *testing.T) {
	f := filepath.Join(t.TempDir(), "prog.py")
	if err := os.WriteFile(f, []byte("print('from file')"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := cli(t, "", "run", f); code != 0 || out != "from file\n" {
		t.Fatalf("file: %d %q", code, out)
	}
	if code, out, _ := cli(t, "print('from stdin')", "run"); code != 0 || out != "from stdin\n" {
		t.Fatalf("stdin: %d %q", code, out)
	}
	if code, out, _ := cli(t, "print('dash')", "run", "-"); code != 0 || out != "dash\n" {
		t.Fatalf("dash: %d %q", code, out)
	}
}

func TestRunFlags(t *testing.T) {
	code, out, errOut := cli(t, "", "run", "--authorized-imports", "math", "-c", "import os")
	if code != 1 || !strings.Contains(errOut, "Import of 'os' is not allowed") {
		t.Fatalf("policy: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(t, "", "run", "--authorized-imports", "*", "-c", "import os\nprint(os.getuid())")
	if code != 0 || out != "1000\n" {
		t.Fatalf("policy off: %d %q", code, out)
	}
	code, _, errOut = cli(t, "", "run", "--timeout", "1", "-c", "while True: pass")
	if code != 1 || !strings.Contains(errOut, "TimeoutError") {
		t.Fatalf("timeout: %d %q", code, errOut)
	}
	code, out, errOut = cli(t, "", "run", "--max-print-length", "5", "-c", "print('abcdefghij')")
	if code != 1 || out != "abcde" || !strings.Contains(errOut, "truncated") {
		t.Fatalf("print length: %d %q %q", code, out, errOut)
	}
	code, _, errOut = cli(t, "", "run", "--max-memory-mb", "32", "--json", "-c", "b = bytearray(200 << 20)")
	if code != 1 {
		t.Fatalf("memory: %d %q", code, errOut)
	}
	code, _, _ = cli(t, "", "run", "-c", "raise SystemExit(4)")
	if code != 4 {
		t.Fatalf("exit status: %d, want 4", code)
	}
}

func TestBadInvocations(t *testing.T) {
	cases := [][]string{
		{"run", "--no-such-flag"},
		{"run", "-c", "1", "file.py"},
		{"run", "--timeout", "-3", "-c", "1"},
		{"run", "--max-memory-mb", "99999999", "-c", "1"},
		{"run", "/does/not/exist.py"},
		{"frobnicate"},
		{},
	}
	for _, args := range cases {
		code, _, errOut := cli(t, "", args...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: exit %d stderr %q, want 2 and a message", args, code, errOut)
		}
	}
}

func TestDoctor(t *testing.T) {
	code, out, errOut := cli(t, "", "doctor")
	if code != 0 {
		t.Fatalf("doctor failed on the CI host: %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"user namespaces", "seccomp", "landlock", "cgroups", "interpreter"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not report %s:\n%s", want, out)
		}
	}
}

func TestValidateCommand(t *testing.T) {
	code, out, _ := cli(t, "", "validate", "--json", "-c", "import os\nos.system('ls')")
	if code != 1 {
		t.Fatalf("exit %d, want 1 for invalid code\n%s", code, out)
	}
	var v struct {
		Validation struct {
			Valid  bool     `json:"valid"`
			Errors []string `json:"errors"`
		} `json:"validation"`
		Analysis map[string]any `json:"analysis"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Validation.Valid || len(v.Validation.Errors) != 1 {
		t.Fatalf("%v %s", err, out)
	}
	if code, out, _ := cli(t, "print(1)", "validate"); code != 0 || !strings.Contains(out, "Code is valid") {
		t.Fatalf("valid code: %d %q", code, out)
	}
	if code, out, _ := cli(t, "", "validate", "--profile", "filesystem", "-c", "import os"); code != 0 {
		t.Fatalf("--profile enables it: %d %q", code, out)
	}
}

func TestInfoCommand(t *testing.T) {
	t.Setenv("SANDBOX_ENABLE_NETWORK", "true")
	t.Setenv("SANDBOX_TIMEOUT", "12")
	code, out, errOut := cli(t, "", "info", "--json", "--max-processes", "32")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var info struct {
		Profiles map[string]struct {
			Enabled bool `json:"enabled"`
		} `json:"security_profiles"`
		Limits map[string]any `json:"resource_limits"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if !info.Profiles["network"].Enabled || info.Profiles["data_science"].Enabled || info.Limits["timeout"] != 12.0 || info.Limits["max_processes"] != 32.0 {
		t.Fatalf("%s", out)
	}
	t.Setenv("SANDBOX_TIMEOUT", "abc")
	code, _, errOut = cli(t, "", "info")
	if code != 2 || !strings.Contains(errOut, "SANDBOX_TIMEOUT") {
		t.Fatalf("bad setting: %d %q", code, errOut)
	}
}

func TestRunWithProfiles(t *testing.T) {
	code, out, errOut := cli(t, "", "run", "--profile", "data_science", "-c", "import numpy\nprint(numpy.arange(4).sum())")
	if code != 0 || out != "6\n" {
		t.Fatalf("%d %q %q", code, out, errOut)
	}
	code, _, errOut = cli(t, "", "run", "-c", "import numpy")
	if code != 1 || !strings.Contains(errOut, "SANDBOX_ENABLE_DATA_SCIENCE=true") {
		t.Fatalf("%d %q", code, errOut)
	}
}

// A command that runs once starts no warm pool and no spare (a spare
// machine session cost `codecage run` seconds of CPU): while its code
// runs, this process's only interpreter on the host is the run's own.
func TestRunStartsNoSpares(t *testing.T) {
	ran, most := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		for {
			n = max(n, descendantsNamed("python3"))
			select {
			case <-ran:
				most <- n
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	code, out, errOut := cli(t, "", "run", "-c", "import time; time.sleep(4); print('done')")
	close(ran)
	if code != 0 || out != "done\n" {
		t.Fatalf("code=%d stdout=%q stderr=%q", code, out, errOut)
	}
	if n := <-most; n != 1 {
		t.Fatalf("at most %d interpreters of this process on the host while the run ran, want its own alone", n)
	}
}

// descendantsNamed counts this process's descendants on the host with
// that name.
func descendantsNamed(name string) int {
	procs := leftovers.HostProcesses()
	parent := map[int]int{}
	for _, p := range procs {
		parent[p.PID] = p.PPID
	}
	n := 0
	for _, p := range procs {
		if p.Name != name {
			continue
		}
		for pid, hops := p.PPID, 0; pid > 1 && hops < 64; pid, hops = parent[pid], hops+1 {
			if pid == os.Getpid() {
				n++
				break
			}
		}
	}
	return n
}
