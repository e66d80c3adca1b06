package fleet

import (
	"bytes"
	"testing"
	"time"
)

// The goal for a small state: snapshot and restore together in
// 50 ms or less. Each round saves from a session and restores into a fresh
// one (started outside the timing), as a resume would: both harnesses
// import cloudpickle on the way (about 30 ms each on an idle host).
//
//	CGO_ENABLED=0 go test -run '^$' -bench BenchmarkState -benchtime 10x ./internal/fleet
const smallState = "x = 41\nnames = ['a', 'b'] * 10\ndef f(v): return v + x\nclass K:\n    pass\nk = K()"

func BenchmarkStateSmall(b *testing.B) { benchState(b, smallState, "1") }

// The same with cloudpickle already imported on both sides: the state's
// own cost.
func BenchmarkStateSmallWarm(b *testing.B) { benchState(b, smallState, "import cloudpickle") }

// A 1e6-row DataFrame (24 MB of state). The restoring harness has pandas
// imported already (its import, 0.4-1.8 s here, is the session's, not the
// state's).
func BenchmarkStateDataFrame(b *testing.B) {
	benchState(b, `import numpy as np, pandas as pd
n = 1_000_000
rows = pd.DataFrame({"a": np.arange(n), "b": np.arange(n) * 0.5, "c": np.arange(n) % 7})`, "import pandas")
}

// benchState times the snapshot of the state code makes and its restore
// into a harness that ran warm.
func benchState(b *testing.B, code, warm string) {
	f := nativeFleet(b)
	var save, load time.Duration
	var size int64
	for b.Loop() {
		b.StopTimer()
		src, dst := startSession(b, f), startSession(b, f)
		runOK(b, src, "", code)
		runOK(b, dst, "", warm)
		runOK(b, src, "", warm)
		var buf bytes.Buffer
		b.StartTimer()
		start := time.Now()
		rep, err := src.SnapshotState(&buf, StateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := dst.RestoreState(&buf, StateOptions{}); err != nil {
			b.Fatal(err)
		}
		save, load, size = save+mid.Sub(start), load+time.Since(mid), rep.Bytes
		b.StopTimer()
		src.Close()
		dst.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(save.Microseconds())/1000/float64(b.N), "ms-snapshot/op")
	b.ReportMetric(float64(load.Microseconds())/1000/float64(b.N), "ms-restore/op")
	b.ReportMetric(float64(size), "state-bytes")
}
