package bench

import (
	"context"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// The persistence rows' measuring functions, once each against a real
// service on each backend: every row has a latency and no error, and the
// snapshot rows name a size.
func TestPersistRows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gvisor bool
		cases  []persistCase
	}{
		{"native", false, []persistCase{nativePersist}},
		{"gvisor", true, []persistCase{gvisorPersist, gvisorNumpyPersist}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cfg := config.DefaultConfig()
			cfg.StateDir = t.TempDir()
			cfg.EnableDataScience = true
			cfg.PoolSize, cfg.DataPoolSize = 0, 0
			cfg.EnableContainerMode = tc.gvisor
			cfg.GVisorPoolSize, cfg.GVisorDataPoolSize = 0, 0
			svc, err := service.New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			var rows []Row
			want := 2*len(tc.cases) + 4 + 1 // snapshot and restore each, pause, resume, park and unpark of the first, a fork
			for _, c := range tc.cases {
				if !tc.gvisor {
					if c = withSpares(svc, c, time.Minute); c.waitSpare == nil {
						t.Fatal("the native case does not wait for the service's spare sessions")
					}
					want++ // the start with no spare
				}
				rows = append(rows, persistRows(ctx, svc, c, 1)...)
			}
			rows = append(rows, forkRow(ctx, svc, tc.cases[0], 1))
			if len(rows) != want {
				t.Fatalf("%d rows, want %d: %+v", len(rows), want, rows)
			}
			for _, r := range rows {
				if r.Runs != 1 || r.Errors != 0 || r.P50 <= 0 {
					t.Errorf("%s: %d runs, %d errors (%s), p50 %v ms", r.Key, r.Runs, r.Errors, r.FirstError, r.P50)
				}
				t.Logf("%-32s %9.2f ms  %s", r.Key, r.P50, r.Notes)
			}
			if n := svc.SessionCount(); n != 0 {
				t.Errorf("%d sessions left open", n)
			}
		})
	}
}
