package bench

import (
	"context"
	"fmt"

	"github.com/codecage/codecage/internal/sandbox"
)

// sessionRuns is how many session lifecycles a session case measures: a
// session starts a sandbox of its own, outside the pools.
func (b *bencher) sessionRuns() int { return max(5, b.n/10) }

// sessionJob is one session's life as an agent lives it: create, a cell
// that sets state, a cell that reads it, close.
func sessionJob(svc *sandbox.Service, useContainer bool) job {
	return func(ctx context.Context, _ int) string {
		info, err := svc.CreateSession(ctx, sandbox.SessionRequest{UseContainer: useContainer})
		if err != nil {
			return err.Error()
		}
		defer svc.CloseSession(context.WithoutCancel(ctx), info.ID, "")
		for _, c := range []struct{ code, want string }{{"x = 41", "null"}, {"x + 1", "42"}} {
			res, err := svc.Execute(ctx, sandbox.Request{SessionID: info.ID, Code: c.code})
			if msg := describe(res, err); msg != "" {
				return msg
			}
			if string(res.Result) != c.want {
				return fmt.Sprintf("%q gave %s, want %s", c.code, res.Result, c.want)
			}
		}
		if err := svc.CloseSession(ctx, info.ID, ""); err != nil {
			return err.Error()
		}
		return ""
	}
}

// sessionRow measures session lifecycles on svc.
func (b *bencher) sessionRow(ctx context.Context, svc *sandbox.Service, key, name string, useContainer bool) Row {
	n := b.sessionRuns()
	b.progress("%s: %d sessions", key, n)
	row := measure(ctx, key, name, n, 1, sessionJob(svc, useContainer))
	row.Notes = "create_session, two cells, close_session"
	return row
}
