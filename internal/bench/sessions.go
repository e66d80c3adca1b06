package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// sessionRuns is how many session lifecycles a session case measures: a
// session starts a sandbox of its own, outside the pools.
func (b *bencher) sessionRuns() int {
	if b.opts.Quick {
		// A quick run shows each row works: under gVisor each cycle is
		// seconds of checkpoint and restore.
		return max(2, b.n/10)
	}
	return max(5, b.n/10)
}

// sessionJob is one session's life as an agent lives it: create, a cell
// that sets state, a cell that reads it, close.
func sessionJob(svc *service.Service, useContainer bool) job {
	return func(ctx context.Context, _ int) string {
		info, err := svc.CreateSession(ctx, service.SessionRequest{UseContainer: useContainer})
		if err != nil {
			return err.Error()
		}
		defer svc.CloseSession(context.WithoutCancel(ctx), info.ID, "")
		for _, c := range []struct{ code, want string }{{"x = 41", "null"}, {"x + 1", "42"}} {
			res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Code: c.code})
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

// sessionRow measures session lifecycles on svc, each started when a
// spare session is ready (the refill between them is not timed), or back
// to back when svc keeps no spares.
func (b *bencher) sessionRow(ctx context.Context, svc *service.Service, key, name string, useContainer bool) Row {
	n := b.sessionRuns()
	backend := config.IsolationNative
	if useContainer {
		backend = config.IsolationGVisor
	}
	class := "session/" + backend
	var before func(context.Context) error
	if _, spares := svc.PoolStats()[class]; spares {
		before = func(ctx context.Context) error {
			return waitFull(ctx, svc, map[string]int{class: 1}, b.opts.PoolTimeout)
		}
	}
	b.progress("%s: %d sessions", key, n)
	start := svc.PoolStats()[class]
	row := measureWith(ctx, key, name, n, 1, before, sessionJob(svc, useContainer))
	end := svc.PoolStats()[class]
	row.PoolHits, row.PoolMisses = end.Hits-start.Hits, end.Misses-start.Misses
	row.Notes = "create_session, two cells, close_session"
	if before != nil {
		row.Throughput = 0
		row.Notes += "; latency only: each waits, untimed, for a spare session"
	}
	return row
}

// machineJob is a machine session's start as an E2B program sees it:
// create and its first command; the session is closed later, untimed
// (closing adds it to done).
func machineJob(svc *service.Service, done *openSessions, useContainer bool) job {
	return func(ctx context.Context, _ int) string {
		info, err := svc.CreateSession(ctx, service.SessionRequest{Machine: true, UseContainer: useContainer})
		if err != nil {
			return err.Error()
		}
		done.add(info.ID)
		return echoReady(ctx, svc, info.ID)
	}
}

// echoReady runs `echo ready` in a session: "" when it said so, else why
// not.
func echoReady(ctx context.Context, svc *service.Service, id string) string {
	res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Command: "echo ready"})
	if err != nil {
		return err.Error()
	}
	if !res.Success || res.Stdout != "ready\n" {
		return fmt.Sprintf("the command gave %q (exit %d)", res.Stdout, res.ExitCode)
	}
	return ""
}

// openSessions are sessions a row closes between its timed runs.
type openSessions struct {
	mu  sync.Mutex
	ids []string
}

func (o *openSessions) add(id string) {
	o.mu.Lock()
	o.ids = append(o.ids, id)
	o.mu.Unlock()
}

// closeAll closes them.
func (o *openSessions) closeAll(ctx context.Context, svc *service.Service) {
	o.mu.Lock()
	ids := o.ids
	o.ids = nil
	o.mu.Unlock()
	for _, id := range ids {
		_ = svc.CloseSession(ctx, id, "")
	}
}

// machineRow measures machine sessions' create and first command, each
// started when a machine spare is ready (the refill and the close between
// them are not timed), or back to back when svc keeps none.
func (b *bencher) machineRow(ctx context.Context, svc *service.Service) Row {
	n := b.sessionRuns()
	const class = "machine/" + config.IsolationNative
	open := &openSessions{}
	defer open.closeAll(context.WithoutCancel(ctx), svc)
	before := func(ctx context.Context) error {
		open.closeAll(ctx, svc)
		if _, spares := svc.PoolStats()[class]; !spares {
			return nil
		}
		return waitFull(ctx, svc, map[string]int{class: 1}, b.opts.PoolTimeout)
	}
	b.progress("machine_first_command: %d machines", n)
	start := svc.PoolStats()[class]
	row := measureWith(ctx, "machine_first_command", "machine session: create, first command", n, 1, before, machineJob(svc, open, false))
	end := svc.PoolStats()[class]
	row.PoolHits, row.PoolMisses = end.Hits-start.Hits, end.Misses-start.Misses
	row.Throughput = 0
	row.Notes = "create_session machine, run_command echo (closed untimed); latency only: each waits, untimed, for a machine spare (SANDBOX_MACHINE_POOL_SIZE); issue #38 asks <= 60 ms native"
	return row
}

// gvisorMachineRow measures gVisor machine sessions' create and first
// command, back to back (gVisor machines have no spares: runsc boots each,
// with root inside when the server runs as root); closes are not timed.
func (b *bencher) gvisorMachineRow(ctx context.Context, svc *service.Service) Row {
	n := max(3, b.sessionRuns()/2)
	open := &openSessions{}
	defer open.closeAll(context.WithoutCancel(ctx), svc)
	before := func(ctx context.Context) error {
		open.closeAll(ctx, svc)
		return nil
	}
	b.progress("gvisor_machine_first_command: %d machines", n)
	row := measureWith(ctx, "gvisor_machine_first_command", "use_container machine session: create, first command", n, 1, before, machineJob(svc, open, true))
	row.Throughput = 0
	row.Notes = "create_session machine use_container (runsc boots it), run_command echo (closed untimed); issue #38 asks for the number, E2B publishes about 150 ms"
	return row
}

// commandRow measures commands in one open session, one after another:
// in a machine each is a process of the session's one sandbox, in its pid
// namespace; otherwise each is a jail of its own (namespaces, cgroup,
// seccomp), which is what a machine saves per command.
func (b *bencher) commandRow(ctx context.Context, svc *service.Service, key, name string, machine, useContainer bool) Row {
	info, err := svc.CreateSession(ctx, service.SessionRequest{Machine: machine, UseContainer: useContainer})
	if err != nil {
		return Row{Key: key, Case: name, Skipped: err.Error()}
	}
	defer svc.CloseSession(context.WithoutCancel(ctx), info.ID, "")
	b.progress("%s: %d commands", key, b.n)
	row := measureWith(ctx, key, name, b.n, 1, nil, func(ctx context.Context, _ int) string {
		return echoReady(ctx, svc, info.ID)
	})
	row.Notes = "run_command echo in one open session, one after another"
	return row
}
