package jail

import (
	"context"
	"errors"
	"sync"
	"time"
)

// CPUTick is how often an armed [Enforcer] compares the CPU usage with the
// budget: a run overshoots its CPU budget by at most about this much.
const CPUTick = 50 * time.Millisecond

// Enforcer enforces the limits of a running sandbox that the kernel does
// not: a wall-clock timeout, the end of a context, a CPU budget of all the
// sandbox's processes together (read from its accounting, a cgroup), and
// the renewal of an [Output] budget for each piece of work. It ends the
// sandbox through a kill function, so one enforcer serves every kind of
// sandbox (a whole jail, a zygote's cell, a gVisor sandbox).
//
// It has no goroutine of its own: the timeout, the context and the CPU
// check are callbacks of the runtime's timers (time.AfterFunc,
// context.AfterFunc), so an Arm is a few timer resets rather than a
// handoff to a waiting goroutine, and a run that ends before any limit
// costs no wakeup at all.
type Enforcer struct {
	kill   func(Limit)
	usage  func() time.Duration // nil: nothing to read, no CPU budget
	output *Output              // nil: no output budget to renew
	idle   time.Duration        // check period until the first Arm
	tick   time.Duration        // check period once armed

	done chan struct{}

	mu       sync.Mutex
	started  bool
	stopped  bool
	gen      uint64        // counts Arms: a callback of an older one does nothing
	period   time.Duration // the CPU check's current period
	budget   time.Duration // the CPU usage that ends the sandbox
	base     time.Duration // usage at the last Arm
	timer    *time.Timer   // the wall-clock timeout; nil while paused
	timerN   uint64        // counts timers: a callback of an older one does nothing
	left     time.Duration // while paused: what the timeout had left
	paused   bool          // the sandbox is frozen: no timeout, no CPU check
	deadline time.Time     // when the running timer fires
	ticker   *time.Timer   // the next CPU check; nil without accounting
	stopCtx  func() bool   // unregisters the current context's callback
	pending  *arm          // an Arm that came before Start
}

// arm is a new budget for the sandbox's next piece of work.
type arm struct {
	ctx          context.Context
	timeout, cpu time.Duration
	base         time.Duration // the CPU usage at the Arm
}

// NewEnforcer returns an enforcer that ends its sandbox with kill (given
// the limit that was hit), reads the CPU time of all the sandbox's
// processes with usage (nil when there is no such accounting: no CPU budget
// then) and renews output's budget (may be nil) at each [Enforcer.Arm].
func NewEnforcer(kill func(Limit), usage func() time.Duration, output *Output) *Enforcer {
	return &Enforcer{kill: kill, usage: usage, output: output, idle: CPUTick, tick: CPUTick,
		done: make(chan struct{})}
}

// SetIdleTick makes the enforcer read the CPU usage only every d until its
// first Arm: a sandbox that waits in a pool runs nothing of anybody's, and
// the per-process RLIMIT_CPU bounds it meanwhile. Call it before Start.
func (e *Enforcer) SetIdleTick(d time.Duration) { e.idle = d }

// Start begins enforcing: timeout from now, the end of ctx (a deadline
// counts as [LimitTimeout], any other end as [LimitCanceled]), and a CPU
// budget: the usage may reach cpu (counted from the accounting's zero, so
// what the sandbox used before it started running counts). Each
// [Enforcer.Arm] replaces all three. Start is called once, and
// [Enforcer.Stop] when the sandbox has ended.
func (e *Enforcer) Start(ctx context.Context, timeout, cpu time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.stopped {
		return
	}
	e.started = true
	e.budget = cpu
	e.setTimeout(timeout)
	e.watch(ctx, e.gen)
	if e.usage != nil {
		e.period = e.idle
		e.ticker = time.AfterFunc(e.period, e.check)
		if e.paused {
			e.ticker.Stop()
		}
	}
	if a := e.pending; a != nil {
		e.pending = nil
		e.apply(*a)
	}
}

// Stop ends the enforcement (the sandbox has ended) and closes Done. A
// callback already under way may still kill the ended sandbox, which is
// harmless.
func (e *Enforcer) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	e.stopped = true
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.ticker != nil {
		e.ticker.Stop()
	}
	if e.stopCtx != nil {
		e.stopCtx()
		e.stopCtx = nil
	}
	close(e.done)
}

// Run is Start, then Stop once exited is closed (the sandbox ended).
func (e *Enforcer) Run(ctx context.Context, timeout, cpu time.Duration, exited <-chan struct{}) {
	e.Start(ctx, timeout, cpu)
	<-exited
	e.Stop()
}

// setTimeout starts the wall-clock timeout d from now; while paused, it
// is kept for Resume. Called with e.mu held.
func (e *Enforcer) setTimeout(d time.Duration) {
	// A new timer, not a Reset: a callback of the old one already under
	// way is held back by its number.
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.timerN++
	if e.paused {
		e.left = d
		return
	}
	n := e.timerN
	e.timer = time.AfterFunc(d, func() { e.expire(n) })
	e.left = 0
	e.deadline = time.Now().Add(d)
}

// expire kills the sandbox for its timeout if timer n is still the
// current one and the sandbox is not paused.
func (e *Enforcer) expire(n uint64) {
	e.mu.Lock()
	current := !e.stopped && !e.paused && e.timerN == n
	e.mu.Unlock()
	if current {
		e.kill(LimitTimeout)
	}
}

// Pause holds the enforcement while the sandbox is frozen: its wall-clock
// timeout stops counting (what it has left is kept for Resume) and its
// CPU budget is not checked (a frozen sandbox uses no CPU). The end of
// the current context still kills it: that is the caller's decision, not
// time spent. Pausing a paused enforcer changes nothing.
func (e *Enforcer) Pause() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped || e.paused {
		return
	}
	e.paused = true
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
		e.timerN++
		e.left = max(time.Until(e.deadline), 0)
	}
	if e.ticker != nil {
		e.ticker.Stop()
	}
}

// Resume enforces again after a Pause: the timeout goes on with what it
// had left, and the CPU checks resume.
func (e *Enforcer) Resume() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped || !e.paused {
		return
	}
	e.paused = false
	if e.started {
		e.setTimeout(e.left)
	}
	if e.ticker != nil {
		e.ticker.Reset(e.period)
	}
}

// watch kills the sandbox when ctx ends, unless a later Arm or the Stop
// came first. Called with e.mu held.
func (e *Enforcer) watch(ctx context.Context, gen uint64) {
	if e.stopCtx != nil {
		e.stopCtx()
		e.stopCtx = nil
	}
	if ctx.Done() == nil {
		return // never ends
	}
	e.stopCtx = context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			e.fire(gen, LimitTimeout)
		} else {
			e.fire(gen, LimitCanceled)
		}
	})
}

// fire kills the sandbox for l if the Arm that set the callback is still
// the current one. The kill runs without e.mu held.
func (e *Enforcer) fire(gen uint64, l Limit) {
	e.mu.Lock()
	current := !e.stopped && e.gen == gen
	e.mu.Unlock()
	if current {
		e.kill(l)
	}
}

// check compares the CPU usage with the budget, and comes back after the
// current period.
func (e *Enforcer) check() {
	e.mu.Lock()
	if e.stopped || e.paused {
		e.mu.Unlock()
		return
	}
	budget := e.budget
	e.mu.Unlock()
	over := e.usage() > budget
	e.mu.Lock()
	if over {
		over = !e.stopped && e.budget == budget
	}
	if !e.stopped && !e.paused {
		e.ticker.Reset(e.period)
	}
	e.mu.Unlock()
	if over {
		e.kill(LimitCPU)
	}
}

// Arm gives the sandbox's next piece of work its own limits, counted from
// now: a wall-clock timeout, a CPU budget counted from the usage now, a
// fresh output budget, and ctx, whose end kills the sandbox. It does
// nothing once the enforcer has stopped.
func (e *Enforcer) Arm(ctx context.Context, timeout, cpu time.Duration) {
	a := arm{ctx: ctx, timeout: timeout, cpu: cpu}
	if e.usage != nil {
		a.base = e.usage()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	if !e.started {
		// Start applies it, as the first thing after its own limits.
		e.pending = &a
		e.base = a.base
		if e.output != nil {
			e.output.Renew()
		}
		return
	}
	e.apply(a)
}

// apply replaces the limits with a's. Called with e.mu held.
func (e *Enforcer) apply(a arm) {
	e.gen++
	e.setTimeout(a.timeout)
	e.watch(a.ctx, e.gen)
	e.budget = a.base + a.cpu
	e.base = a.base
	if e.ticker != nil {
		e.period = e.tick
		if !e.paused {
			e.ticker.Reset(e.period)
		}
	}
	// Under the lock, before Arm returns: once it does, the work may write.
	if e.output != nil {
		e.output.Renew()
	}
}

// CPUBase is the CPU usage at the last Arm (zero before the first): the
// CPU time of the current piece of work is the usage minus it.
func (e *Enforcer) CPUBase() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base
}

// Done is closed when the enforcer has stopped.
func (e *Enforcer) Done() <-chan struct{} { return e.done }
