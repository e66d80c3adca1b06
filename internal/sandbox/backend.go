package sandbox

import (
	"fmt"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
)

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
