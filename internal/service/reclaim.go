package service

// reclaimWorkspaces removes, at start, the session workspaces that a
// process which died without closing them (SIGKILL, a crash) left in the
// state directory: mounted, each holds its tmpfs's memory until unmounted.
// Those of processes still running are left alone.
func (s *Service) reclaimWorkspaces() {
	r, err := reapStaleWorkspaces(s.cfg.StateDir)
	if err != nil {
		s.log().Warn("stale session workspaces: could not look", "state_dir", s.cfg.StateDir, "error", err)
		return
	}
	if r.Removed > 0 || len(r.Kept) > 0 {
		s.log().Info("removed the session workspaces of a process that did not close them", "state_dir", s.cfg.StateDir,
			"workspaces", r.Removed, "unmounted", r.Unmounts)
	}
	for _, k := range r.Kept {
		s.log().Warn("a stale session workspace could not be removed", "workspace", k)
	}
	if r.Unowned > 0 {
		s.log().Warn("session workspaces without an owner record left alone (an older codecage's: remove them when none runs on this state directory)",
			"state_dir", s.cfg.StateDir, "workspaces", r.Unowned)
	}
}
