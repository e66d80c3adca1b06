package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// BenchmarkFileOpsAtDepth is a write of one byte and a listing of the
// workspace, in a session whose workspace holds a chain of directories N
// deep (as planted code would leave it); the write is at the bottom of
// the chain when the path can name it, at the top otherwise.
func BenchmarkFileOpsAtDepth(b *testing.B) {
	for _, depth := range []int{10, 1000} {
		b.Run("depth="+strconv.Itoa(depth), func(b *testing.B) {
			state := b.TempDir()
			cfg := service.LeanTestConfig()
			cfg.EnableFilesystem, cfg.StateDir, cfg.PoolSize = true, state, 0
			svc := newServiceWith(b, cfg)
			ctx := context.Background()
			info, err := svc.CreateSession(ctx, service.SessionRequest{Profiles: []string{"filesystem"}})
			if err != nil {
				b.Fatal(err)
			}
			chain := strings.Repeat("a/", depth)
			if err := os.MkdirAll(filepath.Join(state, "sessions", info.ID, chain), 0o755); err != nil {
				b.Fatal(err)
			}
			b.Run("write", func(b *testing.B) {
				for b.Loop() {
					if _, err := svc.WriteFile(ctx, info.ID, "", chain+"f", []byte("1")); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("list", func(b *testing.B) {
				for b.Loop() {
					if _, err := svc.ListFiles(ctx, info.ID, "", ""); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
