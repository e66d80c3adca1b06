package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/runtime"
)

// box is one running sandbox, whichever backend built it: the native jail
// ([jail.Sandbox]) or gVisor ([gvisor.Sandbox]).
type box interface {
	ID() string
	// Channel is the supervisor's end of the harness's channel.
	Channel() *os.File
	Arm(ctx context.Context, timeout, cpu time.Duration)
	Kill(reason jail.Limit)
	Wait() jail.Exit
	Done() <-chan struct{}
	// HostUID is the host uid of the files the sandbox writes.
	HostUID() int
}

// backendFor picks the backend of a request: gVisor when the operator made
// it the default, or when the request asks for it and container mode is on.
func (s *Service) backendFor(useContainer bool) (string, error) {
	c := s.cfg
	if c.Isolation == policy.IsolationGVisor {
		return policy.IsolationGVisor, nil
	}
	if !useContainer {
		return policy.IsolationNative, nil
	}
	if !c.EnableContainerMode {
		return "", fmt.Errorf("%w: use_container needs container mode, which this server does not enable (SANDBOX_ENABLE_CONTAINER_MODE=true)", ErrInvalidRequest)
	}
	if info := gvisor.Probe(s.gvisorRuntime()); !info.Available {
		return "", fmt.Errorf("%w: use_container: the gVisor backend does not work on this host: %s", ErrUnavailable, info.Error)
	}
	return policy.IsolationGVisor, nil
}

func (s *Service) gvisorRuntime() gvisor.Runtime {
	return gvisor.Runtime{Runsc: s.cfg.Runsc, Platform: s.cfg.GVisorPlatform}
}

// gvisorBoot bounds how long a gVisor sandbox may take to boot and say it
// is ready (about 0.3 s here; far more on a loaded host).
const gvisorBoot = 60 * time.Second

// startBox starts a sandbox for spec on backend. A gVisor sandbox is
// returned once its harness said it is ready (it does when it finds its
// channel on stdin), armed with spec's limits from then on: its boot does
// not count against the run.
func (s *Service) startBox(ctx context.Context, backend string, spec jail.Spec) (box, error) {
	if backend != policy.IsolationGVisor {
		sb, err := jail.Start(ctx, spec)
		if err != nil {
			return nil, err
		}
		return sb, nil
	}
	if spec.Forward != nil {
		spec.Env = append(spec.Env, fmt.Sprintf("CODECAGE_FORWARD=%d:%s", spec.Forward.Port, gvisor.ForwardSocket))
	}
	limits := spec.Limits.WithDefaults()
	spec.Limits.Timeout = gvisorBoot
	sb, err := gvisor.Start(ctx, s.gvisorRuntime(), spec)
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
	return sb, nil
}

// layersOf reports the layers a run on backend gets. Under gVisor the
// code faces gVisor's kernel, filtered by the jail's seccomp rules, with no
// Landlock; cgroups bound gVisor's processes on the host.
func layersOf(backend string) jail.Layers {
	l := jail.ProbeHost().Layers()
	if backend != policy.IsolationGVisor {
		return l
	}
	return jail.Layers{Cgroup: l.Cgroup, Seccomp: true, Warnings: []string{}}
}
