package commands

import (
	"fmt"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// RootHome is root's home in a machine with root inside: its commands
// start there, as on any Debian computer.
const RootHome = "/root"

// asRoot reports whether req runs as root inside se's sandbox, refusing a
// user that is neither the sandbox's user nor root, and root where the
// sandbox has none: a stateless command's jail, any session but a
// machine's, or a server not running as root.
func asRoot(req CommandRequest, se *session.Session) (bool, error) {
	home := fleet.WorkspaceDir
	if se != nil {
		home = se.Home()
	}
	switch req.User {
	case "", "user", fleet.UserOf(home):
		return false, nil
	case "root":
		if se == nil || !inMachine(se) || !se.RootInside() {
			return false, fmt.Errorf("%w: user root: only a machine session's commands run as root inside (a server running as root, SANDBOX_MACHINE_ROOT on); this command's sandbox has no root", errdefs.ErrInvalidRequest)
		}
		return true, nil
	}
	return false, fmt.Errorf("%w: user %s: a command runs as %s (the default) or root", errdefs.ErrInvalidRequest, bounded.Quote(req.User), fleet.UserOf(home))
}

// rootVars are root's own variables, over the session's.
func rootVars(vars map[string]string) map[string]string {
	return withVars(vars, map[string]string{"HOME": RootHome, "USER": "root", "LOGNAME": "root"})
}
