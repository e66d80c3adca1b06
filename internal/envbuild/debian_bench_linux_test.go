package envbuild

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDebianBuild times whole builds from the mirror, without a
// cache: go test -run '^$' -bench DebianBuild -benchtime 1x ./internal/envbuild/
func BenchmarkDebianBuild(b *testing.B) {
	for _, pkgs := range [][]string{{"python3-minimal"}, {"python3-numpy"}} {
		b.Run(pkgs[0], func(b *testing.B) {
			for b.Loop() {
				dir := b.TempDir()
				if err := Debian(context.Background(), DebianOptions{Packages: pkgs}, filepath.Join(dir, "root"), io.Discard); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(dir)
				b.StartTimer()
			}
		})
	}
}
