package jail

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkStartWithRoot times Start (until the program runs) of a
// sandbox with an environment's root and of one with the host's system
// directories, interleaved, and reports the median of each.
func BenchmarkStartWithRoot(b *testing.B) {
	root := minimalRoot(b)
	var host, env []time.Duration
	start := func(spec Spec) time.Duration {
		t0 := time.Now()
		sb, err := Start(context.Background(), spec)
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if e := sb.Wait(); e.ExitCode != 0 {
			b.Fatalf("exit %+v", e)
		}
		sb.Channel().Close()
		return d
	}
	argv := []string{"/bin/sh", "-c", ":"}
	for b.Loop() {
		host = append(host, start(Spec{Argv: argv}))
		env = append(env, start(Spec{Argv: argv, Root: root}))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	b.ReportMetric(median(host), "host-start-µs")
	b.ReportMetric(median(env), "root-start-µs")
}
