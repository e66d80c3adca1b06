package service

// IsOperator reports whether owner (api.Owner of the caller's key) may
// build and remove environments. Until operator keys exist, only a
// server without API keys (every caller is its operator) has one: closed
// by default. The operator-keys work replaces this.
func (s *Service) IsOperator(owner string) bool {
	return s.cfg.APIKeys == "" && s.cfg.APIKeysFile == ""
}
