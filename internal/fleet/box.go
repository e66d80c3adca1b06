package fleet

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// Backends a sandbox can run on.
const (
	Native = "native"
	GVisor = "gvisor"
)

// Box is one running sandbox, whichever backend built it.
type Box interface {
	ID() string
	// Channel is the supervisor's end of the harness's channel.
	Channel() io.ReadWriteCloser
	// Arm gives the sandbox's next piece of work its limits, counted from
	// now; ctx's end kills it.
	Arm(ctx context.Context, timeout, cpu time.Duration)
	// Kill ends the sandbox; the first reason given is the one reported.
	Kill(reason jail.Limit)
	// Wait blocks until the sandbox is gone and torn down.
	Wait() jail.Exit
	// Done is closed when the sandbox is gone and torn down.
	Done() <-chan struct{}
	// HostUID is the host uid of the files the sandbox writes.
	HostUID() int
}

// Starter starts whole sandboxes of one backend: the kernel's in
// production, stand-ins in the fleet's own tests.
type Starter interface {
	Start(ctx context.Context, spec jail.Spec) (Box, error)
}

// usageReporter is a sandbox that can say what it has used so far (gVisor,
// whose runs answer before the sandbox has ended).
type usageReporter interface {
	Usage() (cpu time.Duration, peakMemory int64)
}

// NativeStarter starts sandboxes in the native jail.
type NativeStarter struct{}

// Start implements [Starter].
func (NativeStarter) Start(ctx context.Context, spec jail.Spec) (Box, error) {
	sb, err := jail.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return nativeBox{sb}, nil
}

type nativeBox struct{ *jail.Sandbox }

func (b nativeBox) Channel() io.ReadWriteCloser { return b.Sandbox.Channel() }

// NewGVisorStarter starts sandboxes under gVisor with runsc on platform
// (empty: the pinned runsc, and the platform that works here).
func NewGVisorStarter(runsc, platform string) GVisorStarter {
	return GVisorStarter{Runtime: gvisor.Runtime{Runsc: runsc, Platform: platform}}
}

// GVisorStarter starts sandboxes under gVisor with the runtime rt.
type GVisorStarter struct{ Runtime gvisor.Runtime }

// gvisorBoot bounds how long a gVisor sandbox may take to boot and say it
// is ready (about 0.3 s here; far more on a loaded host).
const gvisorBoot = 60 * time.Second

// Start implements [Starter]. A command's sandbox (spec.Programs) is
// returned at once, armed with its limits and ctx; a harness's once it
// said it is ready (it does when it finds its channel on stdin), armed
// with spec's limits from then on: its boot does not count against the run.
func (g GVisorStarter) Start(ctx context.Context, spec jail.Spec) (Box, error) {
	if spec.Forward != nil {
		spec.Env = append(spec.Env, fmt.Sprintf("CODECAGE_FORWARD=%d:%s", spec.Forward.Port, gvisor.ForwardSocket))
	}
	if spec.Programs != nil {
		// A command, not the harness: nothing says when it is ready, so
		// its limits count from the start, boot included.
		sb, err := gvisor.Start(ctx, g.Runtime, spec)
		if err != nil {
			return nil, err
		}
		l := spec.Limits.WithDefaults()
		sb.Arm(ctx, l.Timeout, l.CPUTime)
		return gvisorBox{sb}, nil
	}
	limits := spec.Limits.WithDefaults()
	spec.Limits.Timeout = gvisorBoot
	sb, err := gvisor.Start(ctx, g.Runtime, spec)
	if err != nil {
		return nil, err
	}
	if err := runtime.ReadReady(sb.Channel()); err != nil {
		sb.Kill(jail.LimitNone)
		exit := sb.Wait()
		_ = sb.Channel().Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("gvisor sandbox did not start (exit %d, signal %d, limit %q): %v %s", exit.ExitCode, exit.Signal, exit.Limit, err, sb.Log())
	}
	sb.Arm(ctx, limits.Timeout, limits.CPUTime)
	return gvisorBox{sb}, nil
}

type gvisorBox struct{ *gvisor.Sandbox }

func (b gvisorBox) Channel() io.ReadWriteCloser { return b.Sandbox.Channel() }

// Restore starts a sandbox from the memory image in dir (see
// [Fleet.StartFromImage]), armed with spec's limits once it runs again:
// the restore does not count against them.
func (g GVisorStarter) Restore(ctx context.Context, dir string, spec jail.Spec) (Box, error) {
	limits := spec.Limits.WithDefaults()
	spec.Limits.Timeout = gvisorBoot
	sb, err := gvisor.Restore(ctx, g.Runtime, dir, spec)
	if err != nil {
		return nil, err
	}
	sb.Arm(ctx, limits.Timeout, limits.CPUTime)
	return gvisorBox{sb}, nil
}
