package session

import (
	"context"
	"fmt"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// Running in a session: code in its interpreter, and commands beside it.

// Run is a request running in a session's interpreter, from BeginRun to
// End: it holds the session's run lock all along.
type Run struct {
	t     *Table
	se    *Session
	lease *fleet.Lease
	// Idle is the CPU time the session's sandbox spent since its previous
	// request ended (what the code left running).
	Idle time.Duration
	// Runs is how many runs the session has taken, this one included.
	Runs int
}

// BeginRun starts a request in the session's interpreter: it takes the
// run lock (End releases it), checks that the interpreter still runs,
// counts the run, gives the sandbox its full CPU bandwidth back and arms
// limits' timeout and CPU time, bound to ctx. refused hears of the hosts
// the session's egress proxy refuses until End.
func (t *Table) BeginRun(ctx context.Context, se *Session, limits fleet.Limits, refused func(host string)) (*Run, error) {
	se.mu.Lock()
	if err := t.wake(ctx, se); err != nil {
		se.mu.Unlock()
		return nil, err
	}
	if err := se.alive(); err != nil {
		se.mu.Unlock()
		return nil, err
	}
	se.used = time.Now()
	se.runs++
	se.info(t.cfg) // what describe gives while this runs
	se.refused.Store(&refused)

	lease := se.sandbox()
	idle := se.cpu.begin(lease, t.cfg.CPULimit, t.log)
	t.addIdleCPU(idle)
	lease.Arm(ctx, limits.Timeout, limits.CPUTime)
	return &Run{t: t, se: se, lease: lease, Idle: idle, Runs: se.runs}, nil
}

// Do runs req in the interpreter (tools answers its tool calls, onOutput
// hears its output as it comes). A run that ends the interpreter ends
// the session, with the reason recorded; otherwise the sandbox goes back
// to idling: no timeout but the session's own, the idle CPU allowance.
func (r *Run) Do(req fleet.HarnessRequest, tools fleet.ToolHandler, onOutput func(stream, line string)) fleet.Outcome {
	t, se, lease := r.t, r.se, r.lease
	o := lease.Run(req, tools, onOutput)
	if o.Ended {
		se.ended = endReason(o.Exit)
	} else {
		// Idle until the next request: no timeout but the session's own.
		lease.Arm(context.Background(), time.Until(se.created.Add(t.cfg.SessionMaxLifetime)), t.cfg.SessionMaxLifetime)
	}
	se.cpu.end(lease, t.cfg.IdleCPU, t.log)
	return o
}

// End ends the request: the session takes the next one.
func (r *Run) End() {
	r.se.refused.Store(nil)
	r.se.mu.Unlock()
}

// Command is what a command of a session runs with.
type Command struct {
	Workspace string        // the session's workspace on the host
	Tmp       string        // the session's /tmp on the host ("": the command's own)
	UID       int           // the host uid of the session's sandboxes
	Idle      time.Duration // the sandbox's CPU time since the session's previous request ended
	// NetNS is the session's network namespace, which the command joins
	// (nil: it gets one of its own; gVisor sessions).
	NetNS *fleet.NetNS
	// Attach tells the session the command's sandbox, once started, so
	// that a pause of the session pauses it too.
	Attach func(*fleet.Lease)
	// Spawn starts the command inside the session's own sandbox, a
	// machine's (Request.Machine): in its cgroup, so its pauses, limits
	// and end are the session's.
	Spawn func(fleet.ProcSpec) (fleet.Proc, error)
}

// spawn starts a process in the session's current sandbox.
func (se *Session) spawn(p fleet.ProcSpec) (fleet.Proc, error) {
	l := se.sandbox()
	if l == nil {
		return nil, fleet.ErrEnded
	}
	return l.Spawn(p)
}

// cmdSandbox is a running command's sandbox, once it is attached; a
// daemon is not a request (StartDaemon).
type cmdSandbox struct {
	lease  *fleet.Lease
	daemon bool
}

// StartCommand registers a command of se about to run beside its
// interpreter and the session's other commands, on the same workspace,
// as processes of one machine. It returns the command's context
// (canceled when the session closes) and done, to call when the command
// has ended. A command is a request in the session: its interpreter,
// which the command may talk to, gets its full CPU bandwidth meanwhile.
func (t *Table) StartCommand(ctx context.Context, se *Session) (context.Context, Command, func(), error) {
	if se.mu.TryLock() {
		// A command runs beside the interpreter, as on a machine: the
		// session must be running. (Held by a request, it runs.)
		err := t.wake(ctx, se)
		se.mu.Unlock()
		if err != nil {
			return nil, Command{}, nil, err
		}
	}
	ctx, workspace, tmp, uid, cs, done, err := se.startCommand(ctx, false)
	if err != nil {
		return nil, Command{}, nil, err
	}
	lease := se.sandbox()
	idle := se.cpu.begin(lease, t.cfg.CPULimit, t.log)
	t.addIdleCPU(idle)
	end := func() {
		se.cpu.end(lease, t.cfg.IdleCPU, t.log)
		done()
	}
	return ctx, Command{Workspace: workspace, Tmp: tmp, UID: uid, Idle: idle, NetNS: se.netns.Load(), Attach: t.attacher(se, cs), Spawn: se.spawn}, end, nil
}

// StartDaemon is StartCommand for a process that lives as long as the
// session (an environment's start command, started as the session
// opens): it is not a request, so the session around it stays idle (its
// idle TTL runs, its interpreter keeps the idle CPU allowance), but it
// pauses, parks and ends with the session as the session's commands do.
func (t *Table) StartDaemon(ctx context.Context, se *Session) (context.Context, Command, func(), error) {
	ctx, workspace, tmp, uid, cs, done, err := se.startCommand(ctx, true)
	if err != nil {
		return nil, Command{}, nil, err
	}
	return ctx, Command{Workspace: workspace, Tmp: tmp, UID: uid, NetNS: se.netns.Load(), Attach: t.attacher(se, cs), Spawn: se.spawn}, done, nil
}

// attacher records a command's sandbox once started; one started as the
// session paused pauses with it.
func (t *Table) attacher(se *Session, cs *cmdSandbox) func(*fleet.Lease) {
	return func(l *fleet.Lease) {
		se.lifeMu.Lock()
		defer se.lifeMu.Unlock()
		cs.lease = l
		if se.frozen {
			if err := l.Pause(); err != nil {
				t.log.Warn("a command started as its session paused could not pause", "session", se.id, "err", err)
			}
		}
	}
}

// startCommand registers a command of se that is about to run; it returns
// the command's context (canceled when the session closes), the
// workspace, the /tmp and their uid, and done, to call when the command
// has ended.
func (se *Session) startCommand(ctx context.Context, daemon bool) (context.Context, string, string, int, *cmdSandbox, func(), error) {
	se.lifeMu.Lock()
	defer se.lifeMu.Unlock()
	switch {
	case se.dropped:
		return nil, "", "", 0, nil, nil, fmt.Errorf("%w: session %s is closed", ErrNotFound, se.id)
	case se.dir == "":
		return nil, "", "", 0, nil, nil, fmt.Errorf("%w: session %s is still starting; try again", ErrEnded, se.id)
	}
	ctx, cancel := context.WithCancel(ctx)
	if se.commands == nil {
		se.commands = map[*context.CancelFunc]*cmdSandbox{}
	}
	cs := &cmdSandbox{daemon: daemon}
	se.commands[&cancel] = cs
	se.cmdsDone.Add(1)
	done := func() {
		cancel()
		se.touched.Store(time.Now().UnixNano())
		se.lifeMu.Lock()
		delete(se.commands, &cancel)
		se.lifeMu.Unlock()
		se.cmdsDone.Done()
	}
	return ctx, se.dir, se.tmp, se.uid, cs, done, nil
}

func endReason(e fleet.Exit) string {
	switch {
	case e.Limit != fleet.LimitNone:
		return "killed at the " + string(e.Limit) + " limit"
	case e.Signal != 0:
		return fmt.Sprintf("the interpreter was killed by signal %d", e.Signal)
	}
	return fmt.Sprintf("the interpreter exited with status %d", e.ExitCode)
}

// alive reports whether the session's interpreter still runs; call with mu.
func (se *Session) alive() error {
	if se.ended == "" {
		lease := se.sandbox()
		select {
		case <-lease.Done():
			se.ended = endReason(lease.Wait())
		default:
			return nil
		}
	}
	return fmt.Errorf("%w: %s %s; restart the session to keep its files, or create a new one", ErrEnded, se.id, se.ended)
}
