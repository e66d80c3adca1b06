package check

import (
	"fmt"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Machine refuses a machine session (session.Request.Machine) this
// server does not give: machines turned off, or a backend whose
// sandboxes cannot start processes beside their interpreter.
func Machine(machine bool, backend string, enabled bool) error {
	switch {
	case !machine:
		return nil
	case !enabled:
		return fmt.Errorf("%w: machine sessions are turned off on this server (SANDBOX_MACHINE_SESSIONS)", errdefs.ErrInvalidRequest)
	case backend != config.IsolationNative && backend != config.IsolationGVisor:
		return fmt.Errorf("%w: machine sessions run on the native or gVisor backend, not %s", errdefs.ErrInvalidRequest, backend)
	}
	return nil
}
