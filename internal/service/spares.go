package service

import (
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
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
	want := map[string]int{}
	if c.Isolation != config.IsolationGVisor {
		want[config.IsolationNative] = c.SessionPoolSize
	}
	if c.GVisorInUse() {
		want[config.IsolationGVisor] = c.GVisorSessionPoolSize
	}
	s.sessions.StartSpares(imports, limits, want)
	if c.MachineSessions && c.Isolation != config.IsolationGVisor {
		shape := session.MachineShape{}
		if c.E2BListen != "" {
			shape = session.MachineShape{Home: E2BHome, Servers: true} // as the E2B surface creates them
		}
		s.sessions.StartMachineSpares(shape, c.MachinePoolSize)
	}
}

// E2BHome is the home of E2B's sandboxes, /home/user as on E2B.
const E2BHome = "/home/user"
