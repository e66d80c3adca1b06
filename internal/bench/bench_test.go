package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/bench"
	"github.com/codecage/codecage/internal/jail"
)

func TestMain(m *testing.M) {
	jail.MaybeRunInit() // the test binary is re-executed as the sandbox init
	os.Exit(m.Run())
}

// TestGVisorOnly: --gvisor-only measures the gVisor rows, pooled and cold,
// and nothing of the native backend.
func TestGVisorOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // a loaded host is slow
	defer cancel()
	rep, err := bench.Run(ctx, bench.Options{N: 2, Clients: 2, Quick: true, GVisorOnly: true}) // which rows, not their numbers: TestQuickRun measures the same rows with N 6
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var keys []string
	for _, row := range rep.Rows {
		keys = append(keys, row.Key)
		if !strings.HasPrefix(row.Key, "gvisor_") || row.Skipped != "" || row.Errors != 0 || row.Runs <= 0 || row.P50 <= 0 {
			t.Errorf("%s: %+v", row.Key, row)
		}
	}
	want := append([]string{"gvisor_print1_warm", "gvisor_print1_sequential", "gvisor_numpy_warm", "gvisor_print1_cold", "gvisor_numpy_cold", "gvisor_session_lifecycle", "gvisor_machine_first_command", "gvisor_machine_command"},
		bench.GVisorPersistKeys()...)
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("rows %v, want %v", keys, want)
	}
}

func TestQuickRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // a loaded host is slow
	defer cancel()
	rep, err := bench.Run(ctx, bench.Options{
		N:              6,
		Clients:        2,
		HumanEvalLimit: 5, // of the embedded sets
		Quick:          true,
		// TestEnvironmentRows measures them.
		SkipEnvironments: true,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	for _, key := range []string{"print1_sequential", "print1_concurrent", "print1_warm", "numpy_sequential", "numpy_warm", "numpy_concurrent", "humaneval", "mbpp", "bare_python_sequential", "bare_python_concurrent",
		"gvisor_print1_warm", "gvisor_print1_sequential", "gvisor_numpy_warm", "gvisor_print1_cold", "gvisor_numpy_cold", "session_lifecycle", "gvisor_session_lifecycle", "gvisor_machine_first_command", "gvisor_machine_command", "machine_first_command", "session_command", "machine_command",
		"session_pause", "session_resume", "session_park", "session_unpark", "gvisor_session_park", "gvisor_session_unpark", "session_snapshot", "session_from_snapshot", "session_fork10", "gvisor_session_pause", "gvisor_numpy250_from_snapshot", "gvisor_session_fork10"} {
		if rep.Row(key) == nil {
			t.Errorf("no row %s", key)
		}
	}
	for _, row := range rep.Rows {
		if row.Skipped != "" {
			if !strings.HasPrefix(row.Key, "bwrap_") {
				t.Errorf("%s skipped: %s", row.Key, row.Skipped)
			}
			continue
		}
		if row.Runs <= 0 || row.P50 <= 0 || (row.Throughput <= 0 && !latencyOnly(row.Key)) {
			t.Errorf("%s: runs %d, p50 %v, runs/s %v", row.Key, row.Runs, row.P50, row.Throughput)
		}
		if row.P50 > row.P95 || row.P95 > row.P99 || row.P99 > row.Max {
			t.Errorf("%s: percentiles out of order: %+v", row.Key, row)
		}
		if strings.HasPrefix(row.Key, "print1_") || strings.HasPrefix(row.Key, "numpy_") || strings.HasPrefix(row.Key, "bare_") || strings.HasPrefix(row.Key, "gvisor_") || strings.HasPrefix(row.Key, "session_") || strings.HasPrefix(row.Key, "machine_") {
			if row.Errors != 0 {
				t.Errorf("%s: %d errors, first: %s", row.Key, row.Errors, row.FirstError)
			}
		}
	}
	if r := rep.Row("machine_first_command"); r != nil && r.PoolHits != int64(r.Runs) {
		t.Errorf("machine_first_command: %d of %d creates took a machine spare", r.PoolHits, r.Runs)
	}
	if r := rep.Row("print1_sequential"); r != nil && r.Runs != 6 {
		t.Errorf("print1_sequential ran %d times, want 6", r.Runs)
	}
	if r := rep.Row("print1_concurrent"); r != nil && (r.Runs != 12 || r.Clients != 2) {
		t.Errorf("print1_concurrent: %d runs, %d clients; want 12, 2", r.Runs, r.Clients)
	}
	if r := rep.Row("numpy_sequential"); r != nil && r.Runs != 3 {
		t.Errorf("numpy_sequential ran %d times, want 3", r.Runs)
	}

	// gVisor from its warm pool: every warm run found a ready sandbox.
	if r := rep.Row("gvisor_print1_warm"); r != nil && r.PoolHits != int64(r.Runs) {
		t.Errorf("gvisor_print1_warm: %d pool hits in %d runs", r.PoolHits, r.Runs)
	}
	if !rep.GVisor.Available || rep.GVisorMemory <= 0 {
		t.Errorf("gVisor: %+v, idle memory %d", rep.GVisor, rep.GVisorMemory)
	}

	// The numpy rows name no profile: the data_science class serves them
	// because the code imports numpy.
	if r := rep.Row("numpy_warm"); r != nil && r.PoolHits != int64(r.Runs) {
		t.Errorf("numpy_warm: %d data_science pool hits in %d runs", r.PoolHits, r.Runs)
	}

	for _, s := range []struct {
		name   string
		suite  bench.Suite
		inFile int
	}{{"HumanEval", rep.HumanEval, 164}, {"MBPP", rep.MBPP, 974}} {
		if s.suite.Total != 5 || s.suite.Passed != s.suite.Total || s.suite.InFile != s.inFile || !strings.Contains(s.suite.Path, "embedded") {
			t.Errorf("%s: %d/%d passed of %d in %s; failures %+v", s.name, s.suite.Passed, s.suite.Total, s.suite.InFile, s.suite.Path, s.suite.Failures)
		}
	}

	if len(rep.Memory) == 0 {
		t.Error("no idle memory measured")
	}
	for _, mc := range rep.Memory {
		if mc.Ready <= 0 || mc.Sandboxes < mc.Ready || mc.Processes < mc.Sandboxes || mc.PSSPerSandbox <= 0 || mc.RSSPerSandbox <= 0 {
			t.Errorf("idle memory %+v", mc)
		}
	}
	if rep.Print1OverBare <= 0 || len(rep.Targets) != 6 {
		t.Errorf("ratio %v, targets %+v", rep.Print1OverBare, rep.Targets)
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var back bench.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if !reflect.DeepEqual(*rep, back) {
		t.Errorf("JSON does not round-trip:\n%+v\n%+v", *rep, back)
	}
	var obj map[string]json.RawMessage
	_ = json.Unmarshal(b, &obj)
	for _, k := range []string{"machine", "rows", "idle_memory", "humaneval", "mbpp", "targets", "print1_p50_over_bare_python_p50"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"p50 ms", "print(1)", "HumanEval: 5/5 passed", "MBPP: 5/5 passed", "Targets:", "bwrap"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}

// latencyOnly: rows that time one step between untimed ones, and
// report no throughput.
func latencyOnly(key string) bool {
	for _, s := range []string{"_warm", "session_lifecycle", "machine_first_command", "_pause", "_resume", "_park", "_unpark", "_snapshot", "_snapshot_cold", "_fork10"} {
		if strings.HasSuffix(key, s) {
			return true
		}
	}
	return false
}

// A failing HumanEval problem is counted and listed, not dropped.
func TestHumanEvalFailureReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "he.jsonl")
	lines := []map[string]string{
		{"task_id": "t/0", "prompt": "def f(x):\n", "canonical_solution": "    return x + 1\n", "test": "def check(c):\n    assert c(1) == 2\n", "entry_point": "f"},
		{"task_id": "t/1", "prompt": "def g(x):\n", "canonical_solution": "    return x\n", "test": "def check(c):\n    assert c(1) == 2, 'wrong'\n", "entry_point": "g"},
	}
	var buf bytes.Buffer
	for _, l := range lines {
		b, _ := json.Marshal(l)
		buf.Write(append(b, '\n'))
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := bench.Run(context.Background(), bench.Options{N: 2, Clients: 1, HumanEvalPath: path, SkipMBPP: true, SuitesOnly: true})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	he := rep.HumanEval
	if he.Total != 2 || he.Passed != 1 || len(he.Failures) != 1 || he.Failures[0].TaskID != "t/1" || he.Failures[0].Type != "AssertionError" {
		t.Fatalf("HumanEval %+v", he)
	}
	if row := rep.Row("humaneval"); row == nil || row.Errors != 1 || row.Runs != 2 {
		t.Fatalf("row %+v", row)
	}
	for _, tg := range rep.Targets {
		if tg.Name == "HumanEval 164/164" && tg.Met {
			t.Fatalf("target met with a failure: %+v", tg)
		}
	}
}

func TestMissingHumanEvalFileIsAnError(t *testing.T) {
	_, err := bench.Run(context.Background(), bench.Options{N: 1, HumanEvalPath: filepath.Join(t.TempDir(), "none.jsonl.gz")})
	if err == nil || !strings.Contains(err.Error(), "humaneval") {
		t.Fatalf("err = %v", err)
	}
}
