package session

import "log/slog"

// Reclaim removes, at start, the session workspaces that a
// process which died without closing them (SIGKILL, a crash) left in the
// state directory: mounted, each holds its tmpfs's memory until unmounted.
// Those of processes still running are left alone.
func Reclaim(stateDir string, log *slog.Logger) {
	r, err := reapStaleWorkspaces(stateDir)
	if err != nil {
		log.Warn("stale session workspaces: could not look", "state_dir", stateDir, "error", err)
		return
	}
	if r.Removed > 0 || len(r.Kept) > 0 {
		log.Info("removed the session workspaces of a process that did not close them", "state_dir", stateDir,
			"workspaces", r.Removed, "unmounted", r.Unmounts)
	}
	for _, k := range r.Kept {
		log.Warn("a stale session workspace could not be removed", "workspace", k)
	}
	if r.Unowned > 0 {
		log.Warn("session workspaces without an owner record left alone (an older codecage's: remove them when none runs on this state directory)",
			"state_dir", stateDir, "workspaces", r.Unowned)
	}
}
