package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// Persistence rows: a session's pause and resume in memory, a snapshot of
// it and a session started from that snapshot, and a fork into copies.
// Each cycle sets up a session (untimed), times the steps one by one and
// checks, untimed, that the state came through.

// benchOwner owns the bench's sessions and snapshots.
const benchOwner = "bench"

// forkCopies is how many copies a fork row makes (the goal).
const forkCopies = 10

// persistCase is one kind of session whose persistence is measured.
type persistCase struct {
	// prefix starts the rows' keys ("session", "gvisor_session", ...),
	// label their names.
	prefix, label string
	req           service.SessionRequest
	// setup runs in the session before the timed steps; check is code
	// whose result must be want after a resume and in a restored copy.
	setup, check, want string
	// pause measures pause and resume in memory too.
	pause bool
	// pauseHow says what a pause in memory is on this backend.
	pauseHow string
	// waitSpare, when set, waits until a spare session is ready: before
	// the session is created and before the timed start from its
	// snapshot (untimed, as the lifecycle row); a second start, right
	// after, finds none (the cold rows).
	waitSpare func(context.Context) error
}

// Small states, the same on both backends: a variable and a file.
const (
	smallSetup = "x = 41\nopen('kept.txt', 'w').write('kept')"
	smallCheck = "x + 1, open('kept.txt').read()"
	smallWant  = `[42,"kept"]`
)

// stepTimes collects one step's latencies and failures over the cycles.
type stepTimes struct {
	lat   []time.Duration
	errs  int
	first string
	sizes []int64
}

func (s *stepTimes) add(d time.Duration) { s.lat = append(s.lat, d) }

func (s *stepTimes) fail(msg string) {
	s.errs++
	if s.first == "" {
		s.first = msg
	}
}

// row is the step's row.
func (s *stepTimes) row(key, name, notes string, wall time.Duration) Row {
	r := Row{Key: key, Case: name, Runs: len(s.lat), Clients: 1, Errors: s.errs, FirstError: s.first, WallSeconds: wall.Seconds(), Notes: notes}
	fillLatency(&r, s.lat)
	return r
}

// meanSize is the mean of the recorded sizes, 0 when none.
func (s *stepTimes) meanSize() int64 {
	if len(s.sizes) == 0 {
		return 0
	}
	var sum int64
	for _, v := range s.sizes {
		sum += v
	}
	return sum / int64(len(s.sizes))
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	t0 := time.Now()
	f()
	return time.Since(t0)
}

// persistRows measures c over n cycles: pause and resume in memory (when
// c.pause), a snapshot, and a session started from it. Latency only: the
// set-up, checks and closes between steps are not timed.
func persistRows(ctx context.Context, svc *service.Service, c persistCase, n int) []Row {
	var pause, resume, park, unpark, snap, restore, cold stepTimes
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		persistCycle(ctx, svc, c, []*stepTimes{&pause, &resume, &park, &unpark}, &snap, &restore, &cold)
	}
	wall := time.Since(start)
	var rows []Row
	if c.pause {
		rows = append(rows,
			pause.row(c.prefix+"_pause", c.label+": pause (memory kept)", c.pauseHow+"; then resumed, untimed", wall),
			resume.row(c.prefix+"_resume", c.label+": resume", "from a pause in memory; the state is checked after, untimed", wall),
			park.row(c.prefix+"_park", c.label+": park", "pause with park: written into the snapshot store (a directory here), its sandbox ended", wall),
			unpark.row(c.prefix+"_unpark", c.label+": resume from the store", "resume of a parked session, same id, until ready; the state is checked after, untimed", wall))
	}
	size := snap.meanSize()
	waits := ""
	if c.waitSpare != nil {
		waits = "; latency only: a spare session ready (waited for, untimed) before the session and before its copy"
	}
	rows = append(rows,
		snap.row(c.prefix+"_snapshot", c.label+": snapshot", fmt.Sprintf("snapshot %s (workspace and interpreter state), the session goes on%s", sizeText(size), waits), wall),
		restore.row(c.prefix+"_from_snapshot", c.label+": start from its snapshot", fmt.Sprintf("create_session from_snapshot (%s) until ready, state restored%s", sizeText(size), waits), wall))
	if c.waitSpare != nil {
		rows = append(rows, cold.row(c.prefix+"_from_snapshot_cold", c.label+": start from its snapshot, no spare",
			"the same, right after the previous one took the spare: a sandbox boots for it", wall))
	}
	return rows
}

// persistCycle is one cycle of persistRows.
func persistCycle(ctx context.Context, svc *service.Service, c persistCase, pausing []*stepTimes, snap, restore, cold *stepTimes) {
	pause, resume, park, unpark := pausing[0], pausing[1], pausing[2], pausing[3]
	steps := []*stepTimes{snap, restore}
	if c.pause {
		steps = append(steps, pausing...)
	}
	failAll := func(msg string) {
		for _, s := range steps {
			s.fail(msg)
		}
	}
	if c.waitSpare != nil {
		steps = append(steps, cold)
	}
	spareReady := func() error {
		if c.waitSpare == nil {
			return nil
		}
		return c.waitSpare(ctx)
	}
	bg := context.WithoutCancel(ctx)
	req := c.req
	req.Owner = benchOwner
	if err := spareReady(); err != nil {
		failAll(err.Error())
		return
	}
	info, err := svc.CreateSession(ctx, req)
	if err != nil {
		failAll("create_session: " + err.Error())
		return
	}
	defer svc.CloseSession(bg, info.ID, benchOwner)
	if msg := runIn(ctx, svc, info.ID, c.setup, ""); msg != "" {
		failAll("setup: " + msg)
		return
	}
	if c.pause {
		var err error
		pause.add(timed(func() { _, err = svc.PauseSession(ctx, info.ID, benchOwner, service.PauseMode{KeepMemory: true}) }))
		if err != nil {
			pause.fail(err.Error())
			resume.fail("not paused")
		} else {
			resume.add(timed(func() { _, _, err = svc.ResumeSession(ctx, info.ID, benchOwner) }))
			if err != nil {
				resume.fail(err.Error())
			} else if msg := runIn(ctx, svc, info.ID, c.check, c.want); msg != "" {
				resume.fail("after resume: " + msg)
			}
		}
		parkCycle(ctx, svc, c, info.ID, park, unpark)
	}
	var si *service.SnapshotInfo
	snap.add(timed(func() { si, err = svc.SnapshotSession(ctx, info.ID, benchOwner, "") }))
	if err != nil {
		snap.fail(err.Error())
		restore.fail("no snapshot")
		return
	}
	defer svc.DeleteSnapshot(bg, benchOwner, si.ID)
	snap.sizes = append(snap.sizes, si.SizeBytes)
	if err := spareReady(); err != nil {
		restore.fail(err.Error())
		return
	}
	restoreStep(ctx, svc, c, si.ID, restore)
	if c.waitSpare != nil {
		restoreStep(ctx, svc, c, si.ID, cold)
	}
}

// restoreStep times a session started from snapshot id, checks its state
// (untimed) and closes it.
func restoreStep(ctx context.Context, svc *service.Service, c persistCase, id string, step *stepTimes) {
	var copyInfo *service.SessionInfo
	var err error
	step.add(timed(func() {
		copyInfo, err = svc.CreateSession(ctx, service.SessionRequest{Owner: benchOwner, FromSnapshot: id})
	}))
	if err != nil {
		step.fail(err.Error())
		return
	}
	defer svc.CloseSession(context.WithoutCancel(ctx), copyInfo.ID, benchOwner)
	if msg := runIn(ctx, svc, copyInfo.ID, c.check, c.want); msg != "" {
		step.fail("in the copy: " + msg)
	}
}

// parkCycle parks session id and resumes it from the store.
func parkCycle(ctx context.Context, svc *service.Service, c persistCase, id string, park, unpark *stepTimes) {
	var err error
	park.add(timed(func() {
		_, err = svc.PauseSession(ctx, id, benchOwner, service.PauseMode{KeepMemory: true, Park: true})
	}))
	if err != nil {
		park.fail(err.Error())
		unpark.fail("not parked")
		return
	}
	unpark.add(timed(func() { _, _, err = svc.ResumeSession(ctx, id, benchOwner) }))
	if err != nil {
		unpark.fail(err.Error())
	} else if msg := runIn(ctx, svc, id, c.check, c.want); msg != "" {
		unpark.fail("after the resume from the store: " + msg)
	}
}

// forkRow measures forks of a session holding c's state into
// forkCopies copies, n times; one copy of each is checked, untimed.
func forkRow(ctx context.Context, svc *service.Service, c persistCase, n int) Row {
	var fork stepTimes
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		forkCycle(ctx, svc, c, &fork)
	}
	return fork.row(fmt.Sprintf("%s_fork%d", c.prefix, forkCopies), fmt.Sprintf("%s: fork into %d copies", c.label, forkCopies),
		fmt.Sprintf("fork_session: a snapshot, %d sessions from it, its deletion; latency only", forkCopies), time.Since(start))
}

func forkCycle(ctx context.Context, svc *service.Service, c persistCase, fork *stepTimes) {
	bg := context.WithoutCancel(ctx)
	req := c.req
	req.Owner = benchOwner
	info, err := svc.CreateSession(ctx, req)
	if err != nil {
		fork.fail("create_session: " + err.Error())
		return
	}
	defer svc.CloseSession(bg, info.ID, benchOwner)
	if msg := runIn(ctx, svc, info.ID, c.setup, ""); msg != "" {
		fork.fail("setup: " + msg)
		return
	}
	var res []service.ForkResult
	fork.add(timed(func() { res, err = svc.ForkSession(ctx, info.ID, benchOwner, forkCopies, 0) }))
	for _, r := range res {
		if r.Session != nil {
			defer svc.CloseSession(bg, r.Session.ID, benchOwner)
		}
	}
	if err != nil {
		fork.fail(err.Error())
		return
	}
	var failed []string
	for _, r := range res {
		if r.Error != nil {
			failed = append(failed, r.Error.Kind+": "+r.Error.Message)
		}
	}
	switch {
	case len(res) != forkCopies:
		fork.fail(fmt.Sprintf("%d copies, want %d", len(res), forkCopies))
	case len(failed) > 0:
		fork.fail(fmt.Sprintf("%d of %d copies failed: %s", len(failed), forkCopies, failed[0]))
	default:
		if msg := runIn(ctx, svc, res[len(res)-1].Session.ID, c.check, c.want); msg != "" {
			fork.fail("in a copy: " + msg)
		}
	}
}

// runIn runs code in a session; a non-empty want is its expected result.
func runIn(ctx context.Context, svc *service.Service, id, code, want string) string {
	res, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: benchOwner, Code: code})
	if msg := describe(res, err); msg != "" {
		return msg
	}
	if got := strings.TrimSpace(string(res.Result)); want != "" && got != want {
		return fmt.Sprintf("%q gave %s, want %s", code, got, want)
	}
	return ""
}

// sizeText is a size for people.
func sizeText(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// The persistence cases of each backend. Under gVisor a pause in memory
// is runsc pause and a snapshot is the memory image (runsc checkpoint);
// the numpy session holds a 250 MB array.
var (
	nativePersist = persistCase{prefix: "session", label: "session", pause: true, pauseHow: "the cgroup freezer",
		setup: smallSetup, check: smallCheck, want: smallWant}
	gvisorPersist = persistCase{prefix: "gvisor_session", label: "use_container session", pause: true, pauseHow: "runsc pause",
		req: service.SessionRequest{UseContainer: true}, setup: smallSetup, check: smallCheck, want: smallWant}
	gvisorNumpyPersist = persistCase{prefix: "gvisor_numpy250", label: "use_container numpy 250 MB session",
		req:   service.SessionRequest{UseContainer: true, Profiles: []string{policy.DataScience}},
		setup: "import numpy\na = numpy.ones(250 * 2**20 // 8)", check: "int(a.sum())", want: fmt.Sprint(250 * (1 << 20) / 8)}
)

// GVisorPersistKeys are the keys of the gVisor persistence rows.
func GVisorPersistKeys() []string {
	return []string{"gvisor_session_pause", "gvisor_session_resume", "gvisor_session_park", "gvisor_session_unpark", "gvisor_session_snapshot", "gvisor_session_from_snapshot",
		"gvisor_numpy250_snapshot", "gvisor_numpy250_from_snapshot", fmt.Sprintf("gvisor_session_fork%d", forkCopies)}
}

// persistence measures the persistence rows of one backend on svc:
// sessionRuns cycles of the small state, fewer of the numpy one and of
// the fork (each costs seconds under gVisor).
func (b *bencher) persistence(ctx context.Context, svc *service.Service, gvisor bool) {
	n := b.sessionRuns()
	c := nativePersist
	if gvisor {
		c = gvisorPersist
	} else {
		c = withSpares(svc, c, b.opts.PoolTimeout)
	}
	b.progress("%s persistence: %d cycles of pause, resume, snapshot, restore", c.label, n)
	b.rep.Rows = append(b.rep.Rows, persistRows(ctx, svc, c, n)...)
	if gvisor {
		b.progress("%s: %d snapshots and restores", gvisorNumpyPersist.label, max(1, n/5))
		b.rep.Rows = append(b.rep.Rows, persistRows(ctx, svc, gvisorNumpyPersist, max(1, n/5))...)
	}
	b.progress("%s: %d forks into %d", c.label, max(1, n/5), forkCopies)
	b.rep.Rows = append(b.rep.Rows, forkRow(ctx, svc, c, max(1, n/5)))
}

// withSpares is the native case c waiting for svc's spare sessions, when
// it keeps them: a native start from a snapshot takes a spare when one is
// ready.
func withSpares(svc *service.Service, c persistCase, timeout time.Duration) persistCase {
	class := "session/" + config.IsolationNative
	if _, ok := svc.PoolStats()[class]; ok {
		c.waitSpare = func(ctx context.Context) error { return waitFull(ctx, svc, map[string]int{class: 1}, timeout) }
	}
	return c
}
