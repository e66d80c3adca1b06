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
// sandbox through a kill function, so one loop serves every kind of
// sandbox (a whole jail, a zygote's cell, a gVisor sandbox).
type Enforcer struct {
	kill   func(Limit)
	usage  func() time.Duration // nil: nothing to read, no CPU budget
	output *Output              // nil: no output budget to renew
	idle   time.Duration        // check period until the first Arm
	tick   time.Duration        // check period once armed

	arms chan arm
	done chan struct{}

	mu   sync.Mutex
	base time.Duration // usage at the last Arm
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
		arms: make(chan arm), done: make(chan struct{})}
}

// SetIdleTick makes the enforcer read the CPU usage only every d until its
// first Arm: a sandbox that waits in a pool runs nothing of anybody's, and
// the per-process RLIMIT_CPU bounds it meanwhile. Call it before Run.
func (e *Enforcer) SetIdleTick(d time.Duration) { e.idle = d }

// Run enforces its limits on the sandbox until exited is closed (the
// sandbox ended): timeout from now, the end of ctx (a deadline counts as
// [LimitTimeout], any other end as [LimitCanceled]), and a CPU budget: the
// usage may reach cpu (counted from the accounting's zero, so what the
// sandbox used before it started running counts). Each [Enforcer.Arm]
// replaces all three. Run is called once; [Enforcer.Done] is closed when
// it returns.
func (e *Enforcer) Run(ctx context.Context, timeout, cpu time.Duration, exited <-chan struct{}) {
	defer close(e.done)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var tick <-chan time.Time
	var ticker *time.Ticker
	if e.usage != nil {
		ticker = time.NewTicker(e.idle)
		defer ticker.Stop()
		tick = ticker.C
	}
	budget := cpu
	ctxDone := ctx.Done()
	for {
		select {
		case <-exited:
			return
		case <-timer.C:
			e.kill(LimitTimeout)
		case <-ctxDone:
			ctxDone = nil // fires once; the kill is on its way
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				e.kill(LimitTimeout)
			} else {
				e.kill(LimitCanceled)
			}
		case a := <-e.arms:
			timer.Reset(a.timeout)
			ctx, ctxDone = a.ctx, a.ctx.Done()
			if ticker != nil {
				ticker.Reset(e.tick)
			}
			budget = a.base + a.cpu
		case <-tick:
			if e.usage() > budget {
				e.kill(LimitCPU)
			}
		}
	}
}

// Arm gives the sandbox's next piece of work its own limits, counted from
// now: a wall-clock timeout, a CPU budget counted from the usage now, a
// fresh output budget, and ctx, whose end kills the sandbox. It waits for
// Run to take them, and does nothing once Run has returned.
func (e *Enforcer) Arm(ctx context.Context, timeout, cpu time.Duration) {
	a := arm{ctx: ctx, timeout: timeout, cpu: cpu}
	if e.usage != nil {
		a.base = e.usage()
	}
	select {
	case e.arms <- a:
		// Here, not in Run: once Arm returns, the work may write.
		if e.output != nil {
			e.output.Renew()
		}
		e.mu.Lock()
		e.base = a.base
		e.mu.Unlock()
	case <-e.done:
	}
}

// CPUBase is the CPU usage at the last Arm (zero before the first): the
// CPU time of the current piece of work is the usage minus it.
func (e *Enforcer) CPUBase() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.base
}

// Done is closed when Run has returned.
func (e *Enforcer) Done() <-chan struct{} { return e.done }
