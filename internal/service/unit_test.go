package service

import (
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/runtime"
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

func TestBuildResult(t *testing.T) {
	lim := jail.Limits{Timeout: 3 * time.Second, CPUTime: 2 * time.Second, MemoryBytes: 64 << 20, OutputBytes: 100}
	line := 3
	cases := []struct {
		name    string
		o       fleet.Outcome
		success bool
		errType string
		limit   string
	}{
		{"value", fleet.Outcome{Reply: &runtime.Reply{Result: json.RawMessage("42")}, Stdout: "hi\n"}, true, "", ""},
		{"exception", fleet.Outcome{Reply: &runtime.Reply{Error: &runtime.Error{Type: "ZeroDivisionError", Message: "division by zero", Line: &line}}}, false, "ZeroDivisionError", ""},
		{"timeout", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitTimeout, ExitCode: -1, Signal: 9}}, false, "TimeoutError", "timeout"},
		{"cpu", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitCPU, ExitCode: -1, Signal: 9}}, false, "CPUTimeLimitExceeded", "cpu_time"},
		{"output", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitOutput, Truncated: true}}, false, "OutputLimitExceeded", "output"},
		{"canceled", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitCanceled}}, false, "Canceled", "canceled"},
		{"MemoryError without a memory cgroup", fleet.Outcome{Reply: &runtime.Reply{Error: &runtime.Error{Type: "MemoryError"}}}, false, "MemoryError", "memory"},
		{"killed by a signal", fleet.Outcome{Exit: jail.Exit{ExitCode: -1, Signal: int(syscall.SIGSEGV)}}, false, "Crash", ""},
		{"exited early", fleet.Outcome{Exit: jail.Exit{ExitCode: 3}}, false, "Exit", ""},
		{"os._exit(0)", fleet.Outcome{Exit: jail.Exit{}}, true, "", ""},
		{"sys.exit(2)", fleet.Outcome{Reply: &runtime.Reply{ExitCode: 2}}, false, "", ""},
	}
	for _, c := range cases {
		r := buildResult("id", "native", c.o, lim)
		gotType := ""
		if r.Error != nil {
			gotType = r.Error.Type
		}
		gotLimit := ""
		if r.Limit != nil {
			gotLimit = *r.Limit
		}
		if r.Success != c.success || gotType != c.errType || gotLimit != c.limit || r.ExecutionID != "id" || r.Stdout != c.o.Stdout {
			t.Errorf("%s: success %v error %q limit %q, want %v %q %q (%+v)", c.name, r.Success, gotType, gotLimit, c.success, c.errType, c.limit, r)
		}
	}
	r := buildResult("id", "native", fleet.Outcome{Exit: jail.Exit{Limit: jail.LimitTimeout}}, lim)
	if !r.TimedOut || !strings.Contains(r.Error.Message, "3s") {
		t.Fatalf("timeout result: %+v %+v", r, r.Error)
	}
	if r := buildResult("id", "native", fleet.Outcome{}, lim); string(r.Result) != "null" || r.Variables == nil {
		t.Fatalf("empty result: %+v", r)
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
