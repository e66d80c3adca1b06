package gvisor_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
)

// BenchmarkGVisorCommandInput measures a gVisor command (cat, from start
// to its end) without input (it reads its closed channel), with a stdin
// pipe (closed at once), and on a terminal (^D at once); the three run
// interleaved, in a rotating order, so that the host's load falls on each
// alike.
//
//	CGO_ENABLED=0 go test -run '^$' -bench GVisorCommandInput -benchtime 20x ./internal/gvisor
func BenchmarkGVisorCommandInput(b *testing.B) {
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		b.Fatalf("gVisor does not work here: %s", info.Error)
	}
	rt := gvisor.Runtime{StateDir: b.TempDir()}
	kinds := []string{"plain", "stdin", "terminal"}
	var total [3]time.Duration
	run := func(kind int) time.Duration {
		var out bytes.Buffer
		spec := jail.Spec{Argv: []string{"/bin/cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out}
		switch kinds[kind] {
		case "stdin":
			spec.Stdin = true
		case "terminal":
			spec.Terminal = &jail.WindowSize{Cols: 80, Rows: 24}
		}
		start := time.Now()
		sb, err := gvisor.Start(context.Background(), rt, spec)
		if err != nil {
			b.Fatal(err)
		}
		if kind == 0 {
			_ = sb.Channel().Close()
		} else if err := sb.CloseInput(); err != nil {
			b.Fatal(err)
		}
		exit := sb.Wait()
		took := time.Since(start)
		_ = sb.Channel().Close()
		if exit.ExitCode != 0 {
			b.Fatalf("%s: %+v %q %s", kinds[kind], exit, out.String(), sb.Log())
		}
		return took
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range kinds {
			k := (i + j) % len(kinds)
			total[k] += run(k)
		}
	}
	for k, name := range kinds {
		b.ReportMetric(float64(total[k].Milliseconds())/float64(b.N), "ms-"+name)
	}
}
