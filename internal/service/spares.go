package service

import (
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/sizing"
	"github.com/codecage/codecage/internal/session"
)

// startSpares has the session table keep spare sessions, per backend in
// use, of the one shape most sessions ask for: the default profiles and
// memory (see internal/session's spares.go).
func (s *Service) startSpares() {
	c := s.cfg
	if c.MaxSessions <= 0 {
		return
	}
	imports, err := s.resolveImports(nil, nil)
	var limits fleet.Limits
	if err == nil {
		limits, err = s.limits(Request{}, imports.Whole())
	}
	if err != nil {
		s.log().Warn("no spare sessions: the default shape does not resolve", "error", err)
		return
	}
	s.sessions.StartSpares(imports, limits, sizing.Spares(c))
	n, home, servers := sizing.MachineSpares(c)
	s.sessions.StartMachineSpares(session.MachineShape{Home: home, Servers: servers}, n)
}

// E2BHome is the home of E2B's sandboxes (the E2B surface's).
const E2BHome = sizing.E2BHome
