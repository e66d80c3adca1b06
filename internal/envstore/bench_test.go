package envstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
)

// BenchmarkImportCommitStdlib imports a docker archive whose one layer is
// the host's Python standard library (~60 MB) and commits it.
//
//	go test -run '^$' -bench ImportCommitStdlib -benchtime 3x ./internal/envstore/
func BenchmarkImportCommitStdlib(b *testing.B) {
	src := "/usr/lib/python3.11"
	if _, err := os.Stat(src); err != nil {
		b.Skipf("no %s: %v", src, err)
	}
	img, err := envfixture.Image(mustLayer(b)(envfixture.LayerFromDir(src)))
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []format{formats[0], formats[2]} {
		ref := filepath.Join(b.TempDir(), "stdlib.tar")
		if err := f.write(ref, img); err != nil {
			b.Fatal(err)
		}
		b.Run(f.name, func(b *testing.B) { benchImport(b, ref) })
	}
}

func benchImport(b *testing.B, ref string) {
	s := openStore(b)
	b.ResetTimer()
	var size int64
	var importT, commitT time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		st, err := s.Stage()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ImportImage(context.Background(), st, ref, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		e, err := s.Commit(st, envstore.Env{Name: fmt.Sprintf("stdlib-%d", i)})
		importT, commitT = importT+t1.Sub(t0), commitT+time.Since(t1)
		if err != nil {
			b.Fatal(err)
		}
		size = e.Size
		b.StopTimer()
		s.Remove(e.Name)
		s.GC()
		b.StartTimer()
	}
	b.SetBytes(size)
	b.ReportMetric(importT.Seconds()/float64(b.N), "import-s/op")
	b.ReportMetric(commitT.Seconds()/float64(b.N), "commit-s/op")
}
