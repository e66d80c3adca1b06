package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestLoadPrecedenceAndErrors(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/codecage.json"
	writeFile(t, file, `{"timeout": 10, "max_output_size": "2m", "enable_network": true, "network_allow": ["a.com", "*.b.org"]}`)
	env := map[string]string{"SANDBOX_TIMEOUT": "20", "SANDBOX_DEFAULT_MEMORY_LIMIT": "256m"}
	c, err := Load(file, func(k string) string { return env[k] }, map[string]string{"timeout": "40"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeout != 40*time.Second || c.MemoryLimit != 256<<20 || c.OutputSize != 2<<20 || !c.EnableNetwork || len(c.NetworkAllow) != 2 {
		t.Fatalf("%+v", c)
	}
	bad := []map[string]string{
		{"SANDBOX_TIMEOUT": "abc"},
		{"SANDBOX_TIMEOUT": "-5"},
		{"SANDBOX_DEFAULT_MEMORY_LIMIT": "lots"},
		{"SANDBOX_ENABLE_NETWORK": "maybe"},
		{"SANDBOX_MAX_PROCESSES": "0"},
		{"SANDBOX_TIMEOUT": "400"}, // above SANDBOX_MAX_TIMEOUT
		{"SANDBOX_DEFAULT_MEMORY_LIMIT": "1m"},
		{"SANDBOX_PYTHON": "python3"},
		{"SANDBOX_DEFAULT_PROFILES": "gpu"},
		{"SANDBOX_DEFAULT_PROFILES": "network"}, // not enabled
		// Values that would wrap around once converted.
		{"SANDBOX_MAX_TIMEOUT": "NaN"},
		{"SANDBOX_PIP_TIMEOUT": "+Inf"},
		{"SANDBOX_MAX_CODE_SIZE": "NaN"},
		{"SANDBOX_MAX_BODY_SIZE": "Inf"},
	}
	for _, e := range bad {
		_, err := Load("", func(k string) string { return e[k] }, nil)
		if err == nil {
			t.Errorf("%v: accepted", e)
			continue
		}
		for k := range e {
			if !strings.Contains(err.Error(), k) && !strings.Contains(err.Error(), "maximum") && !strings.Contains(err.Error(), "at least") {
				t.Errorf("%v: error does not name the setting: %v", e, err)
			}
			if k == "SANDBOX_DEFAULT_PROFILES" && !strings.Contains(err.Error(), "gpu") && !strings.Contains(err.Error(), "SANDBOX_ENABLE_NETWORK") {
				t.Errorf("%v: error does not name the setting: %v", e, err)
			}
		}
	}
	writeFile(t, file, `{"no_such_setting": 1}`)
	if _, err := Load(file, func(string) string { return "" }, nil); err == nil || !strings.Contains(err.Error(), "no_such_setting") {
		t.Errorf("unknown file key: %v", err)
	}
	if _, err := Load("", func(string) string { return "" }, map[string]string{"bogus": "1"}); err == nil {
		t.Error("unknown flag accepted")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "512k": 512 << 10, "128m": 128 << 20, "4G": 4 << 30, "1.5g": 3 << 29, "64MiB": 64 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("%s: %d %v", in, got, err)
		}
	}
	for _, in := range []string{"", "abc", "-1m", "0", "1e30"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestRateLimitDependsOnKeys(t *testing.T) {
	c := DefaultConfig()
	if c.RateLimit != RateAuto || c.AccessLimits().Rate != 0 {
		t.Fatalf("default: %v, gate %v", c.RateLimit, c.AccessLimits().Rate)
	}
	without, with := c, c
	without.ResolveCallerLimits(false)
	with.ResolveCallerLimits(true)
	if without.RateLimit != 0 || with.RateLimit != DefaultKeyRate {
		t.Fatalf("without keys %v, with keys %v", without.RateLimit, with.RateLimit)
	}
	// Without keys the one caller's burst queues for the global cap; a key
	// keeps its own concurrency limit.
	if without.AccessLimits().PerKey != 0 || with.AccessLimits().PerKey != c.KeyConcurrency || without.AccessLimits().Queue != c.QueueSize {
		t.Fatalf("per-key concurrency without keys %d, with keys %d", without.AccessLimits().PerKey, with.AccessLimits().PerKey)
	}
	// A rate the operator set is kept either way.
	set, err := Load("", func(k string) string { return map[string]string{"SANDBOX_RATE_LIMIT": "5"}[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	set.ResolveCallerLimits(false)
	if set.RateLimit != 5 {
		t.Fatalf("set: %v", set.RateLimit)
	}
	for _, v := range []string{"auto", "AUTO"} {
		c, err := Load("", func(k string) string { return map[string]string{"SANDBOX_RATE_LIMIT": v}[k] }, nil)
		if err != nil || c.RateLimit != RateAuto {
			t.Fatalf("%s: %v %v", v, c.RateLimit, err)
		}
	}
	if _, err := Load("", func(k string) string { return map[string]string{"SANDBOX_RATE_LIMIT": "-1"}[k] }, nil); err == nil || !strings.Contains(err.Error(), "SANDBOX_RATE_LIMIT") {
		t.Fatalf("-1: %v", err)
	}
}

// SANDBOX_MAX_SANDBOXES bounds every sandbox, the ready ones included: a
// configuration whose pools and spare sessions alone exceed it is refused,
// naming the settings that add up.
func TestReadySandboxesWithinTheBudget(t *testing.T) {
	c := DefaultConfig()
	c.EnableDataScience = true
	c.MaxSandboxes = c.PoolSize + c.DataPoolSize + c.SessionPoolSize + c.MachinePoolSize
	if err := c.validate(); err != nil {
		t.Fatalf("pools that fit: %v", err)
	}
	c.MaxSandboxes--
	err := c.validate()
	if err == nil || !strings.Contains(err.Error(), "SANDBOX_SESSION_POOL_SIZE") || !strings.Contains(err.Error(), "SANDBOX_MACHINE_POOL_SIZE") ||
		!strings.Contains(err.Error(), "SANDBOX_MAX_SANDBOXES") {
		t.Fatalf("pools over the budget: %v", err)
	}
	c.MaxSessions = 0 // no sessions, no spares
	if err := c.validate(); err != nil {
		t.Fatalf("without sessions: %v", err)
	}
}

func TestCPUBandwidthSettings(t *testing.T) {
	c, err := Load("", func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.CPULimit != 1 || c.IdleCPU <= 0 || c.IdleCPU >= c.CPULimit {
		t.Fatalf("defaults: SANDBOX_CPU_LIMIT=%g SANDBOX_SESSION_IDLE_CPU=%g, want 1 and a small fraction of it", c.CPULimit, c.IdleCPU)
	}
	env := map[string]string{"SANDBOX_CPU_LIMIT": " 0.5 ", "SANDBOX_SESSION_IDLE_CPU": "0.05"}
	if c, err = Load("", func(k string) string { return env[k] }, nil); err != nil || c.CPULimit != 0.5 || c.IdleCPU != 0.05 {
		t.Fatalf("0.5 and 0.05: %g %g %v", c.CPULimit, c.IdleCPU, err)
	}
	if c, err = Load("", func(string) string { return "" }, map[string]string{"cpu-limit": "2"}); err != nil || c.CPULimit != 2 {
		t.Fatalf("--cpu-limit 2: %g %v", c.CPULimit, err)
	}
	for _, e := range []map[string]string{
		{"SANDBOX_CPU_LIMIT": "0"},
		{"SANDBOX_CPU_LIMIT": "-1"},
		{"SANDBOX_CPU_LIMIT": "abc"},
		{"SANDBOX_CPU_LIMIT": "NaN"},
		{"SANDBOX_CPU_LIMIT": "Inf"},
		{"SANDBOX_CPU_LIMIT": "1e9"},
		{"SANDBOX_CPU_LIMIT": "0.001"}, // under the kernel's 1 ms quota
		{"SANDBOX_SESSION_IDLE_CPU": "0"},
		{"SANDBOX_SESSION_IDLE_CPU": "2"}, // above SANDBOX_CPU_LIMIT
		{"SANDBOX_CPU_LIMIT": "0.5", "SANDBOX_SESSION_IDLE_CPU": "0.6"},
	} {
		_, err := Load("", func(k string) string { return e[k] }, nil)
		if err == nil {
			t.Errorf("%v: accepted", e)
			continue
		}
		named := false
		for k := range e {
			named = named || strings.Contains(err.Error(), k)
		}
		if !named {
			t.Errorf("%v: the error does not name the setting: %v", e, err)
		}
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A key's share of the sessions and watches: auto is half of each bound
// with two or more keys, none with one key or without keys (the one
// caller has the whole server); a number set is kept with keys, and
// without keys it does not apply.
func TestKeySharesDependOnKeys(t *testing.T) {
	c := DefaultConfig()
	if c.KeyMaxSessions != KeyShareAuto || c.KeyMaxWatches != KeyShareAuto {
		t.Fatalf("default: %d %d, want auto", c.KeyMaxSessions, c.KeyMaxWatches)
	}
	for keys, want := range map[int][2]int{0: {0, 0}, 1: {0, 0}, 2: {c.MaxSessions / 2, c.MaxWatches / 2}, 5: {c.MaxSessions / 2, c.MaxWatches / 2}} {
		r := c
		r.ResolveKeyShares(keys)
		if r.KeyMaxSessions != want[0] || r.KeyMaxWatches != want[1] {
			t.Errorf("%d keys: sessions %d, watches %d; want %v", keys, r.KeyMaxSessions, r.KeyMaxWatches, want)
		}
	}
	one := c
	one.MaxSessions = 1
	one.ResolveKeyShares(2)
	if one.KeyMaxSessions != 1 {
		t.Errorf("a bound of 1: share %d, want 1", one.KeyMaxSessions)
	}
	env := map[string]string{"SANDBOX_KEY_MAX_SESSIONS": "5", "SANDBOX_KEY_MAX_WATCHES": "0"}
	set, err := Load("", func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	with, without := set, set
	with.ResolveKeyShares(3)
	without.ResolveKeyShares(0)
	if with.KeyMaxSessions != 5 || with.KeyMaxWatches != 0 || without.KeyMaxSessions != 0 {
		t.Errorf("set: with keys %d %d, without %d", with.KeyMaxSessions, with.KeyMaxWatches, without.KeyMaxSessions)
	}
	for _, bad := range []string{"-1", "half", "1.5"} {
		if _, err := Load("", func(k string) string { return map[string]string{"SANDBOX_KEY_MAX_SESSIONS": bad}[k] }, nil); err == nil || !strings.Contains(err.Error(), "SANDBOX_KEY_MAX_SESSIONS") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
