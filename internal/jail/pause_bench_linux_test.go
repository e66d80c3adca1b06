package jail

import (
	"context"
	"testing"
	"time"
)

// BenchmarkPauseResume pauses and resumes a sandbox in memory (the cgroup
// freezer): one that spins on two processes, and one that waits idle (a
// session between requests); and the spinning one without a freezer. The
// issue's goal is 5 ms or less each.
//
//	CGO_ENABLED=0 go test -run '^$' -bench PauseResume -benchtime 200x ./internal/jail/
func BenchmarkPauseResume(b *testing.B) {
	b.Run("busy", func(b *testing.B) {
		benchPauseResume(b, startSpinner(b, Limits{Timeout: time.Hour, CPUTime: time.Hour}))
	})
	b.Run("idle", func(b *testing.B) {
		sb, err := Start(context.Background(), Spec{Argv: python("import os\nos.read(3, 1)"), Limits: Limits{Timeout: time.Hour}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			sb.Kill(LimitNone)
			sb.Wait()
			_ = sb.Channel().Close()
		})
		time.Sleep(100 * time.Millisecond) // python is up and waiting
		benchPauseResume(b, sb)
	})
	// Without a freezer (a pod without writable cgroups): SIGSTOP and
	// SIGCONT to each process of the sandbox (sigstop_linux.go).
	b.Run("busy-sigstop", func(b *testing.B) {
		sb, _ := startWithoutCgroups(b)
		benchPauseResume(b, sb)
	})
}

func benchPauseResume(b *testing.B, sb *Sandbox) {
	var paused, resumed time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := sb.Pause(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := sb.Resume(); err != nil {
			b.Fatal(err)
		}
		paused += t1.Sub(t0)
		resumed += time.Since(t1)
	}
	b.ReportMetric(float64(paused.Microseconds())/float64(b.N)/1000, "pause-ms")
	b.ReportMetric(float64(resumed.Microseconds())/float64(b.N)/1000, "resume-ms")
}
