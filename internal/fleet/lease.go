package fleet

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/pool"
	"github.com/codecage/codecage/internal/runtime"
)

// Lease is one sandbox and its slot of the fleet's budget, held by one
// piece of work: a run, a command, a session for its whole life. Release
// gives the slot back once the sandbox is gone.
type Lease struct {
	fleet   *Fleet
	backend string
	slot    *pool.Slot
	class   *class // the pool it came from, or nil

	mu             sync.Mutex // guards box: a session's restart replaces it
	box            Box
	stdout, stderr *switchWriter

	used     atomic.Bool // a run or program has had the sandbox
	released atomic.Bool
	onEnd    func() // run once the sandbox is gone after Release, or nil
}

// ID names the sandbox (and the execution it runs).
func (l *Lease) ID() string { return l.current().ID() }

// Backend is the backend the sandbox runs on: [Native] or [GVisor].
func (l *Lease) Backend() string { return l.backend }

// HostUID is the host uid of the files the sandbox writes.
func (l *Lease) HostUID() int { return l.current().HostUID() }

// Arm gives the sandbox's next piece of work its limits, counted from now.
func (l *Lease) Arm(ctx context.Context, timeout, cpu time.Duration) {
	l.current().Arm(ctx, timeout, cpu)
}

// cpuController is a whole sandbox whose CPU bandwidth can change while it
// runs, and whose CPU use can be read (a native jail, gVisor).
type cpuController interface {
	SetCPU(cores float64) error
	CPUUsage() time.Duration
}

// SetCPU changes the sandbox's CPU bandwidth to cores: a session lowers it
// to its idle allowance between requests.
func (l *Lease) SetCPU(cores float64) error {
	c, ok := l.current().(cpuController)
	if !ok {
		return errors.New("fleet: this sandbox's CPU bandwidth cannot change")
	}
	return c.SetCPU(cores)
}

// CPUUsage is the CPU time every process of the sandbox has used so far
// (0 when it cannot be read).
func (l *Lease) CPUUsage() time.Duration {
	if c, ok := l.current().(cpuController); ok {
		return c.CPUUsage()
	}
	return 0
}

// Kill ends the sandbox; the first reason given is the one reported.
func (l *Lease) Kill(reason jail.Limit) { l.current().Kill(reason) }

// Done is closed when the sandbox is gone.
func (l *Lease) Done() <-chan struct{} { return l.current().Done() }

// Wait blocks until the sandbox is gone and says how it ended.
func (l *Lease) Wait() jail.Exit { return l.current().Wait() }

func (l *Lease) current() Box {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.box
}

// WaitProgram is for a sandbox that runs a program, not the harness (a
// command, pip): it waits for the program's end and releases the lease.
func (l *Lease) WaitProgram() jail.Exit {
	l.used.Store(true)
	b := l.current()
	_ = b.Channel().Close() // the program has no use for the harness channel
	exit := b.Wait()
	l.Release()
	return exit
}

// Validate runs the code analyzer's one exchange in a sandbox started with
// runtime.ValidatorArgv, waits for its end, and releases the lease.
func (l *Lease) Validate(req runtime.ValidateRequest) (*runtime.Validation, jail.Exit, error) {
	l.used.Store(true)
	b := l.current()
	done := make(chan error, 1)
	var v runtime.Validation
	go func() {
		if err := runtime.WriteValidateRequest(b.Channel(), req); err != nil {
			done <- err
			return
		}
		done <- runtime.ReadValidation(b.Channel(), &v)
	}()
	exit := b.Wait()
	err := <-done // the sandbox is gone: the reader has its answer or EOF
	l.Release()
	if err != nil {
		return nil, exit, err
	}
	return &v, exit, nil
}

// Replace ends the sandbox and starts another from spec under the same
// slot (a session's restart). On error the lease keeps the ended sandbox.
func (l *Lease) Replace(ctx context.Context, spec jail.Spec) error {
	if l.class != nil {
		return errors.New("fleet: a pooled sandbox cannot be replaced")
	}
	old := l.current()
	old.Kill(jail.LimitNone)
	old.Wait()
	_ = old.Channel().Close()
	b, err := l.fleet.startBox(ctx, l.backend, spec, l.stdout, l.stderr)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.box = b
	l.mu.Unlock()
	return nil
}

// Release ends the holder's use of the sandbox. A sandbox that ran its
// work ends on its own (it is armed); one that never did, or is paused,
// is killed. The
// slot returns to the budget once the sandbox is gone.
func (l *Lease) Release() {
	if !l.released.CompareAndSwap(false, true) {
		return
	}
	if l.class != nil {
		l.class.pool.Release()
	}
	b := l.current()
	// A paused sandbox would never end on its own: its limits are held.
	if !l.used.Load() || l.Paused() {
		b.Kill(jail.LimitNone)
	}
	end := func() {
		_ = b.Channel().Close()
		l.slot.Release()
		if l.onEnd != nil {
			l.onEnd()
		}
	}
	if d, ok := b.(afterDoner); ok {
		d.AfterDone(end)
		return
	}
	select {
	case <-b.Done():
		end()
	default:
		go func() {
			<-b.Done()
			end()
		}()
	}
}

// afterDoner is a sandbox that runs a function once it has ended (a
// zygote's cell), which spares a goroutine parked on Done per release.
type afterDoner interface{ AfterDone(f func()) }

// Close kills the sandbox and releases the lease: a session's end, or a
// pooled sandbox that nobody took.
func (l *Lease) Close() {
	l.current().Kill(jail.LimitNone)
	l.used.Store(true)
	l.Release()
	l.current().Wait()
}

// alive reports whether the sandbox still runs.
func (l *Lease) alive() bool {
	select {
	case <-l.Done():
		return false
	default:
		return true
	}
}
