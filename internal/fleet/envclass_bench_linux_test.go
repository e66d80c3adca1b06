package fleet

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/runtime"
)

// The goal: a warm run in an environment as fast as in the
// default class. Each sub-benchmark times runs of "1" taken from a class
// (a zygote's cells, refilled between runs as under load), and reports
// the first run (the environment's class made on demand: zygote cold)
// and the warm runs' p50. The environment's class here has the host's
// root (Root "") and a key of its own; with an environment's root
// (envfixture) set Root on envClass's spec to measure that root.
//
//	CGO_ENABLED=0 go test -run '^$' -bench BenchmarkRunInEnvironment -benchtime 50x ./internal/fleet
func BenchmarkRunInEnvironment(b *testing.B) {
	def := envClass("", 1)
	def.Env = ""
	b.Run("default", func(b *testing.B) { benchClassRuns(b, def, true) })
	b.Run("environment", func(b *testing.B) { benchClassRuns(b, envClass("sha256:benchbenchbenchbench", 1), false) })
}

func benchClassRuns(b *testing.B, cs ClassSpec, static bool) {
	cfg := Config{MaxSandboxes: 4, Starters: map[string]Starter{Native: NativeStarter{}}}
	if static {
		cfg.Classes = []ClassSpec{cs}
	}
	f := New(cfg)
	defer f.Close()
	once := func() time.Duration {
		start := time.Now()
		l, ok, err := f.TakeIn(context.Background(), cs, cs.Spec.Limits)
		if !ok || err != nil {
			b.Fatalf("take: ok %v, %v", ok, err)
		}
		o := l.Run(runtime.Request{Code: "1", MaxResultBytes: 1 << 10}, nil, nil)
		l.Release()
		if o.Reply == nil || o.Reply.Error != nil {
			b.Fatalf("run: %+v %q", o.Exit, o.Stderr)
		}
		return time.Since(start)
	}
	first := once()
	var took []time.Duration
	for b.Loop() {
		b.StopTimer()
		// As between requests: the pool has its next cell ready.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if st := f.Stats(); statsReady(st) {
				break
			}
		}
		b.StartTimer()
		took = append(took, once())
	}
	slices.Sort(took)
	b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
}

// statsReady: every pool has a sandbox ready.
func statsReady(st map[string]PoolStats) bool {
	for _, s := range st {
		if s.Ready == 0 {
			return false
		}
	}
	return len(st) > 0
}
