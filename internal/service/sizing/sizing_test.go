package sizing

import (
	"errors"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
)

func TestRunLimitsFromRequestAndConfig(t *testing.T) {
	cfg := config.DefaultConfig()
	l, err := Run(cfg, Asked{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if l.Timeout != cfg.Timeout || l.MemoryBytes != cfg.MemoryLimit || l.OutputBytes != cfg.OutputSize || l.CPUTime != min(max(cfg.CPUTime, cfg.Timeout), cfg.MaxCPUTime) {
		t.Fatalf("defaults: %+v", l)
	}
	if l, _ := Run(cfg, Asked{}, true); l.MemoryBytes != cfg.DataMemory {
		t.Fatalf("data_science memory default: %d", l.MemoryBytes)
	}
	if l, _ := Run(cfg, Asked{Memory: 300 << 20}, true); l.MemoryBytes != 300<<20 {
		t.Fatalf("an explicit memory limit wins: %d", l.MemoryBytes)
	}
	if l, _ := Run(cfg, Asked{Timeout: 2 * time.Second, CPUTime: time.Second}, false); l.Timeout != 2*time.Second || l.CPUTime != time.Second {
		t.Fatalf("explicit: %+v", l)
	}
	for _, bad := range []Asked{
		{Timeout: cfg.MaxTimeout + time.Second},
		{Timeout: -time.Second},
		{CPUTime: cfg.MaxCPUTime + time.Second},
		{Memory: 1},
		{Memory: cfg.MaxMemory + 1},
		{Output: cfg.MaxOutput + 1},
	} {
		if _, err := Run(cfg, bad, false); !errors.Is(err, errdefs.ErrInvalidRequest) {
			t.Errorf("%+v: want invalid request, got %v", bad, err)
		}
	}
}

// The fleet keeps a pool per backend and class the configuration uses:
// none native when every run is gVisor's, data_science's only when it is
// enabled, each with its class's memory.
func TestFleetPoolsFollowTheConfiguration(t *testing.T) {
	classes := func(c config.Config) map[string]int64 {
		out := map[string]int64{}
		for _, cl := range Fleet(c, nil).Classes {
			out[cl.Backend+"/"+cl.Name] = cl.Spec.Limits.MemoryBytes
		}
		return out
	}
	cfg := config.DefaultConfig()
	cfg.EnableDataScience = false
	got := classes(cfg)
	if len(got) != 2 || got[fleet.Native+"/basic"] != cfg.MemoryLimit || got[fleet.GVisor+"/basic"] != cfg.MemoryLimit {
		t.Errorf("default classes: %v", got)
	}
	cfg.EnableDataScience = true
	if got := classes(cfg); len(got) != 4 || got[fleet.Native+"/data_science"] != cfg.DataMemory {
		t.Errorf("with data_science: %v", got)
	}
	cfg.Isolation = config.IsolationGVisor
	for k := range classes(cfg) {
		if k[:len(fleet.Native)] == fleet.Native {
			t.Errorf("a native class under SANDBOX_ISOLATION=gvisor: %s", k)
		}
	}
}
