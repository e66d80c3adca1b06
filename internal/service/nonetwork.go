package service

import "github.com/codecage/codecage/internal/policy"

// withoutNetwork is req with the network profile dropped from its
// profiles when it asks for no network (NoNetwork): a session that names
// no profile gets the operator's defaults without network, so that
// enabling the network profile never gives egress to a session that
// denied it. The list is explicit from here on (basic when nothing else
// is left), so the session's snapshots, forks and parks keep the deny.
func (s *Service) withoutNetwork(req SessionRequest) SessionRequest {
	if !req.NoNetwork {
		return req
	}
	profiles := req.Profiles
	if len(profiles) == 0 {
		profiles = s.cfg.DefaultProfileSet()
	}
	out := []string{}
	for _, p := range profiles {
		if p != policy.Network {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		out = []string{policy.Basic}
	}
	req.Profiles = out
	return req
}
