package service

import (
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/session"
)

// These tests need no kernel sandbox: they check the service's pure
// decisions (limits, results, the spares' shape) directly.

// A session request fits the spare sessions when it resolves to their
// shape, however it was spelled.
func TestSpareFitting(t *testing.T) {
	s := &Service{cfg: config.DefaultConfig()}
	imports, err := s.resolveImports(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	limits, _ := s.limits(Request{}, imports.Whole())
	sp := session.NewTable(s.cfg, session.Options{})
	sp.StartSpares(imports, limits, nil)
	if !sp.FitsSpares(imports, limits) {
		t.Fatal("the default shape does not fit")
	}
	named, err := s.resolveImports(imports.Profiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !sp.FitsSpares(named, limits) {
		t.Fatalf("the default profiles named explicitly do not fit: %+v vs %+v", named, imports)
	}
	more := limits
	more.MemoryBytes *= 2
	if sp.FitsSpares(imports, more) {
		t.Fatal("other memory fits")
	}
	narrow, err := s.resolveImports(nil, []string{"json"})
	if err == nil && sp.FitsSpares(narrow, limits) {
		t.Fatal("a narrower import list fits")
	}
}
