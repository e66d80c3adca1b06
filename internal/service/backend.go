package service

import (
	"fmt"

	"github.com/codecage/codecage/internal/service/check"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
)

// backendFor picks the backend of a request: gVisor when the operator made
// it the default, or when the request asks for it and container mode is on.
func (s *Service) backendFor(useContainer bool) (string, error) {
	c := s.cfg
	if c.Isolation == config.IsolationGVisor {
		return config.IsolationGVisor, nil
	}
	if !useContainer {
		return config.IsolationNative, nil
	}
	if !c.EnableContainerMode {
		return "", fmt.Errorf("%w: use_container needs container mode, which this server does not enable (SANDBOX_ENABLE_CONTAINER_MODE=true)", ErrInvalidRequest)
	}
	if info := fleet.ProbeGVisor(s.cfg.Runsc, s.cfg.GVisorPlatform); !info.Available {
		return "", fmt.Errorf("%w: use_container: the gVisor backend does not work on this host: %s", ErrUnavailable, info.Error)
	}
	return config.IsolationGVisor, nil
}

// OffersMachines reports whether a session asking for a machine, with
// useContainer, would get one (E2B asks for one wherever it can).
func (s *Service) OffersMachines(useContainer bool) bool {
	b, err := s.backendFor(useContainer)
	return err == nil && check.Machine(true, b, s.cfg.MachineSessions) == nil
}
