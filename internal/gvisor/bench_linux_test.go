package gvisor_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// The sessions the benchmark saves: a plain one, and one that imported
// numpy and pandas and holds a DataFrame (about 250 MB resident).
var benchSessions = []struct{ name, code string }{
	{"plain", "x = 1"},
	{"numpy", "import numpy as np, pandas as pd; df = pd.DataFrame(np.random.rand(2_000_000, 8)); x = float(df[0].sum())"},
}

// BenchmarkGVisorImage measures, per session kind, a pause (a checkpoint
// that ends the sandbox), a resume (a restore until the harness answers)
// and the image's size; and a fork into 10 (ten restores of one image at
// once, until each answers).
//
//	CGO_ENABLED=0 go test -run '^$' -bench GVisorImage -benchtime 5x ./internal/gvisor
func BenchmarkGVisorImage(b *testing.B) {
	for _, s := range benchSessions {
		b.Run(s.name+"/pause", func(b *testing.B) {
			uid := reserveUID(b)
			rt := gvisor.Runtime{StateDir: b.TempDir()}
			ws := sandboxWorkspace(b, uid)
			var bytes int64
			for i := range b.N {
				b.StopTimer()
				sb := startSession(b, rt, ws, uid, s.code)
				img := filepath.Join(b.TempDir(), "img")
				b.StartTimer()
				m, err := sb.Checkpoint(context.Background(), img, false)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				bytes = m.Bytes
				_ = i
			}
			b.ReportMetric(float64(bytes)/1e6, "MB-image")
		})
		b.Run(s.name+"/resume", func(b *testing.B) {
			uid := reserveUID(b)
			rt := gvisor.Runtime{StateDir: b.TempDir()}
			ws := sandboxWorkspace(b, uid)
			img := filepath.Join(b.TempDir(), "img")
			sb := startSession(b, rt, ws, uid, s.code)
			if _, err := sb.Checkpoint(context.Background(), img, false); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				r, err := gvisor.Restore(context.Background(), rt, img, benchSpec(ws, 0))
				if err != nil {
					b.Fatal(err)
				}
				ask(b, r, "x")
				b.StopTimer()
				r.Kill(jail.LimitNone)
				r.Wait()
				r.Channel().Close()
				b.StartTimer()
			}
		})
	}
	b.Run("fork10", func(b *testing.B) {
		uid := reserveUID(b)
		rt := gvisor.Runtime{StateDir: b.TempDir()}
		ws := sandboxWorkspace(b, uid)
		img := filepath.Join(b.TempDir(), "img")
		sb := startSession(b, rt, ws, uid, benchSessions[0].code)
		if _, err := sb.Checkpoint(context.Background(), img, true); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			var wg sync.WaitGroup
			forks := make([]*gvisor.Sandbox, 10)
			for i := range forks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := gvisor.Restore(context.Background(), rt, img, benchSpec(ws, 0))
					if err != nil {
						b.Error(err)
						return
					}
					forks[i] = r
					_ = r.Channel().SetDeadline(timeIn60())
					if a := runtime.Exchange(r.Channel(), runtime.Request{Code: "x", KeepAlive: true}, nil); a.Reply == nil {
						b.Errorf("fork %d did not answer", i)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			for _, r := range forks {
				if r != nil {
					r.Kill(jail.LimitNone)
					r.Wait()
					r.Channel().Close()
				}
			}
			b.StartTimer()
		}
	})
}

// startSession starts the harness with a 1 GB limit and runs code in it.
func startSession(b *testing.B, rt gvisor.Runtime, ws string, uid int, code string) *gvisor.Sandbox {
	b.Helper()
	sb, err := gvisor.Start(context.Background(), rt, benchSpec(ws, uid))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Kill(jail.LimitNone); sb.Wait(); sb.Channel().Close() })
	if err := runtime.ReadReady(sb.Channel()); err != nil {
		b.Fatalf("the harness is not ready: %v %s", err, sb.Log())
	}
	ask(b, sb, code)
	return sb
}

func timeIn60() time.Time { return time.Now().Add(60 * time.Second) }

// benchSpec is a data-science session's spec with a 1 GB memory limit.
func benchSpec(ws string, uid int) jail.Spec {
	spec := harnessSpec(ws, uid)
	spec.Limits.MemoryBytes = 1 << 30
	spec.Env, spec.ReadOnlyBinds = runtime.DataScienceEnv(spec.Env)
	return spec
}
