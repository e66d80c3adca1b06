package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/bench"
	"github.com/codecage/codecage/internal/config"
)

// TestEnvironmentRows: --env-only builds both environments, runs in them
// and in the default one without an error, finds the environments'
// zygotes on the host, and runs numpy from the environment's layer.
func TestEnvironmentRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, bench.Options{N: 4, Quick: true, EnvOnly: true})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var keys []string
	for _, row := range rep.Rows {
		keys = append(keys, row.Key)
		if row.Skipped != "" || row.Errors != 0 || row.Runs <= 0 || row.P50 <= 0 || row.P50 > row.Max {
			t.Errorf("%s: %+v", row.Key, row)
		}
	}
	if want := bench.EnvKeys(); strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("rows %v, want %v", keys, want)
	}
	for key, runs := range map[string]int{"env_build_numpy_pandas": 1, "env_first_run": 3, "env_image_first_run": 3, "env_print1_warm": 4, "env_numpy_warm": 2} {
		if r := rep.Row(key); r.Runs != runs {
			t.Errorf("%s: %d runs, want %d", key, r.Runs, runs)
		}
	}
	// The environment's numpy, not the host's.
	if r := rep.Row("env_numpy_warm"); !strings.Contains(r.Notes, "/opt/codecage/env/numpy/") {
		t.Errorf("env_numpy_warm: %s", r.Notes)
	}
	// Zygotes read from the host: the default classes' and one per class
	// each environment used.
	found := map[string]int{}
	for _, z := range rep.EnvZygotes {
		found[z.Environment+"/"+z.Class]++
		if z.PID <= 0 || z.RSS <= 0 || z.PSS <= 0 {
			t.Errorf("zygote %+v", z)
		}
		if z.Environment == "bench-numpy-pandas" && z.Preload != "numpy,pandas" {
			t.Errorf("zygote %+v: want numpy,pandas pre-imported", z)
		}
	}
	for _, k := range []string{"/basic", "/data_science", "bench-numpy-pandas/basic", "bench-numpy-pandas/data_science", "bench-image/basic"} {
		if found[k] != 1 {
			t.Errorf("%d zygotes %s, want 1 (all: %+v)", found[k], k, rep.EnvZygotes)
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first run in bench-numpy-pandas", "Zygotes", "in an environment as fast as"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q", want)
		}
	}
	t.Logf("\n%s", table.String())
}

// Without an environment pool the rows say why they were not measured.
func TestEnvironmentRowsWithoutPool(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.EnvPoolSize = 0
	rep, err := bench.Run(context.Background(), bench.Options{Config: cfg, EnvOnly: true, Quick: true})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Rows) != len(bench.EnvKeys()) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(bench.EnvKeys()))
	}
	for _, row := range rep.Rows {
		if !strings.Contains(row.Skipped, "SANDBOX_ENV_POOL_SIZE") {
			t.Errorf("%s: %+v", row.Key, row)
		}
	}
}
