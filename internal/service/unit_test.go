package service

import (
	"errors"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/session"
)

// These tests need no kernel sandbox: they check the service's pure
// decisions (limits, results, the spares' shape) directly.

func TestLimitsFromRequestAndConfig(t *testing.T) {
	cfg := config.DefaultConfig()
	s := &Service{cfg: cfg}
	l, err := s.limits(Request{}, policy.Features{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Timeout != cfg.Timeout || l.MemoryBytes != cfg.MemoryLimit || l.OutputBytes != cfg.OutputSize || l.CPUTime != min(max(cfg.CPUTime, cfg.Timeout), cfg.MaxCPUTime) {
		t.Fatalf("defaults: %+v", l)
	}
	if l, _ := s.limits(Request{}, policy.Features{DataScience: true}); l.MemoryBytes != cfg.DataMemory {
		t.Fatalf("data_science memory default: %d", l.MemoryBytes)
	}
	if l, _ := s.limits(Request{MemoryBytes: 300 << 20}, policy.Features{DataScience: true}); l.MemoryBytes != 300<<20 {
		t.Fatalf("an explicit memory limit wins: %d", l.MemoryBytes)
	}
	if l, _ := s.limits(Request{Timeout: 2 * time.Second, CPUTime: time.Second}, policy.Features{}); l.Timeout != 2*time.Second || l.CPUTime != time.Second {
		t.Fatalf("explicit: %+v", l)
	}
	for _, bad := range []Request{
		{Timeout: cfg.MaxTimeout + time.Second},
		{Timeout: -time.Second},
		{CPUTime: cfg.MaxCPUTime + time.Second},
		{MemoryBytes: 1},
		{MemoryBytes: cfg.MaxMemory + 1},
		{OutputBytes: cfg.MaxOutput + 1},
	} {
		if _, err := s.limits(bad, policy.Features{}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%+v: want invalid request, got %v", bad, err)
		}
	}
}

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
