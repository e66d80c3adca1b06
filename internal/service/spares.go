package service

import (
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
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
}
