package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLimitChecks(t *testing.T) {
	var le *LimitError
	if err := CheckDuration("timeout", -time.Second, time.Minute); !errors.As(err, &le) || le.Name != "timeout" {
		t.Errorf("negative: %v", err)
	}
	if err := CheckDuration("timeout", time.Hour, time.Minute); err == nil {
		t.Error("over the bound must fail")
	}
	if err := CheckDuration("timeout", time.Second, time.Minute); err != nil {
		t.Error(err)
	}
	if err := CheckBytes("memory", 1, 16, 1024); err == nil {
		t.Error("under the minimum must fail")
	}
	if err := CheckBytes("memory", 0, 16, 1024); err != nil {
		t.Error("zero means default:", err)
	}
}

func TestAllows(t *testing.T) {
	cases := []struct {
		allowed []string
		module  string
		want    bool
	}{
		{[]string{"math"}, "math", true},
		{[]string{"xml"}, "xml.etree.ElementTree", true},
		{[]string{"urllib.parse"}, "urllib", true}, // the package above an allowed module
		{[]string{"urllib.parse"}, "urllib.request", false},
		{[]string{"os.path"}, "os", true},
		{[]string{"math"}, "mathx", false},
		{[]string{"*"}, "anything", true},
		{nil, "math", false},
	}
	for _, c := range cases {
		if got := Allows(c.allowed, c.module); got != c.want {
			t.Errorf("Allows(%v, %q) = %v", c.allowed, c.module, got)
		}
	}
}

func TestResolveImports(t *testing.T) {
	c := Operator{} // the operator's defaults: nothing enabled, no override
	pol, err := c.ResolveImports(nil, nil)
	if err != nil || !Allows(pol.Modules, "math") || Allows(pol.Modules, "os") || pol.Label() != "basic" {
		t.Fatalf("default: %v %+v", err, pol)
	}
	if h := pol.Hints["os"]; h != "it is available in profile filesystem (SANDBOX_ENABLE_FILESYSTEM=true)" {
		t.Fatalf("hint for os: %q", h)
	}
	if _, err := c.ResolveImports([]string{"data_science"}, nil); err == nil || !strings.Contains(err.Error(), "SANDBOX_ENABLE_DATA_SCIENCE=true") {
		t.Fatalf("disabled profile: %v", err)
	}
	if _, err := c.ResolveImports([]string{"nope"}, nil); err == nil || !strings.Contains(err.Error(), "unknown profile") {
		t.Fatalf("unknown profile: %v", err)
	}
	if _, err := c.ResolveImports(nil, []string{"os"}); err == nil || !strings.Contains(err.Error(), "SANDBOX_ENABLE_FILESYSTEM=true") {
		t.Fatalf("more than allowed: %v", err)
	}
	if _, err := c.ResolveImports(nil, []string{"*"}); err == nil || !strings.Contains(err.Error(), "SANDBOX_ALLOWED_IMPORTS=*") {
		t.Fatalf("policy off without the operator: %v", err)
	}
	c.EnableFilesystem = true
	// Enabled means usable: a request that names no profile gets every
	// enabled one.
	pol, err = c.ResolveImports(nil, nil)
	if err != nil || !Allows(pol.Modules, "os") || pol.Label() != "basic+filesystem" || !pol.Defaulted {
		t.Fatalf("enabled, not named: %v %+v", err, pol)
	}
	// A request that names basic alone keeps to it, and is told how to
	// get more.
	pol, err = c.ResolveImports([]string{"basic"}, nil)
	if err != nil || Allows(pol.Modules, "os") || pol.Defaulted || pol.Hints["os"] != `it is available in profile filesystem (request profile "filesystem")` {
		t.Fatalf("basic named: %v %+v", err, pol)
	}
	// SANDBOX_DEFAULT_PROFILES still decides when set.
	c.DefaultProfiles = []string{"basic"}
	if pol, err = c.ResolveImports(nil, nil); err != nil || Allows(pol.Modules, "os") || !pol.Defaulted {
		t.Fatalf("default profiles basic: %v %+v", err, pol)
	}
	c.DefaultProfiles = nil
	pol, err = c.ResolveImports([]string{"basic", "filesystem"}, nil)
	if err != nil || !Allows(pol.Modules, "os") || !Allows(pol.Modules, "math") || pol.Label() != "basic+filesystem" {
		t.Fatalf("combined profiles: %v %+v", err, pol)
	}
	pol, err = c.ResolveImports(nil, []string{"os", "math"})
	if err != nil || !Allows(pol.Modules, "os") || Allows(pol.Modules, "json") {
		t.Fatalf("request list within the ceiling: %v %+v", err, pol)
	}
	// Operator override replaces the profiles' lists.
	c.AllowedImports = []string{"math", "os"}
	pol, err = c.ResolveImports(nil, nil)
	if err != nil || !Allows(pol.Modules, "os") || Allows(pol.Modules, "json") {
		t.Fatalf("override: %v %+v", err, pol)
	}
	if _, err := c.ResolveImports(nil, []string{"json"}); err == nil {
		t.Fatal("request above the override must fail")
	}
	c.AllowedImports = []string{"*"}
	pol, err = c.ResolveImports(nil, nil)
	if err != nil || pol.Modules != nil {
		t.Fatalf("override *: %v %+v", err, pol)
	}
}

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

func TestSysAndOrdinaryModulesAreBasic(t *testing.T) {
	c := Operator{} // the operator's defaults: nothing enabled, no override
	pol, err := c.ResolveImports(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// What HumanEval and MBPP import, and what ordinary code does.
	for _, m := range []string{"sys", "math", "re", "collections", "heapq", "itertools", "cmath", "operator", "array", "bisect",
		"copy", "datetime", "typing", "random", "string", "hashlib", "io", "queue", "asyncio", "threading",
		"concurrent.futures", "dataclasses", "functools", "unittest", "logging", "fnmatch", "collections.abc"} {
		if !Allows(pol.Modules, m) {
			t.Errorf("basic refuses %s", m)
		}
	}
	for _, m := range []string{"os", "subprocess", "socket", "ctypes", "shutil", "pathlib", "multiprocessing", "urllib.request", "numpy"} {
		if Allows(pol.Modules, m) {
			t.Errorf("basic allows %s", m)
		}
	}
}

func TestScanImports(t *testing.T) {
	code := "import numpy as np, os.path\n" +
		"from sklearn.linear_model import LinearRegression\n" +
		"def f():\n    import pandas\n" +
		"x = 1; import json\n" +
		"from urllib import request, parse as p\n" +
		"from . import sibling\n" +
		"from collections import *\n" +
		"importlib.import_module('scipy.stats')\n" +
		"m = __import__(\"matplotlib\")\n" +
		"print('import nothing')\n" +
		"important = 1\n" +
		"from_ = 2\n"
	got := ScanImports(code)
	want := []string{"numpy", "os.path", "sklearn.linear_model", "sklearn.linear_model.LinearRegression", "pandas", "json",
		"urllib", "urllib.request", "urllib.parse", "collections", "matplotlib", "scipy.stats"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ScanImports:\n got %q\nwant %q", got, want)
	}
	if got := ScanImports(""); len(got) != 0 {
		t.Fatalf("empty code: %q", got)
	}
}

func TestFeaturesFollowTheCodeWhenNoProfileIsNamed(t *testing.T) {
	c := Operator{} // the operator's defaults: nothing enabled, no override
	c.EnableDataScience, c.EnableNetwork, c.EnableFilesystem = true, true, true
	def, err := c.ResolveImports(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		code          string
		data, network bool
	}{
		{"print(1)", false, false},
		{"import math, sys\nsys.maxsize", false, false},
		{"import numpy as np\nnp.ones(3).sum()", true, false},
		{"import matplotlib.pyplot as plt", true, false},
		{"from sklearn import datasets", true, false},
		{"import urllib.parse\nurllib.parse.quote('a b')", false, false},
		{"import urllib.request", false, true},
		{"from urllib import request", false, true},
		{"import requests", false, true},
		{"import pandas as pd\npd.read_csv('https://example.com/x.csv')", true, true},
		{"import os\nos.listdir('.')", false, false},
	}
	for _, tc := range cases {
		f := def.FeaturesFor(tc.code)
		if f.DataScience != tc.data || f.Network != tc.network {
			t.Errorf("%q: %+v, want data %v network %v", tc.code, f, tc.data, tc.network)
		}
	}
	// A named profile is given whole, whatever the code.
	named, err := c.ResolveImports([]string{"data_science", "network"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := named.FeaturesFor("print(1)"); !f.DataScience || !f.Network {
		t.Errorf("named profiles: %+v", f)
	}
	if f := def.Whole(); !f.DataScience || !f.Network {
		t.Errorf("whole: %+v", f)
	}
	// Profiles the operator did not enable are never features.
	plain := Operator{} // the operator's defaults: nothing enabled, no override
	pol, _ := plain.ResolveImports(nil, nil)
	if f := pol.FeaturesFor("import numpy\nimport urllib.request\n'https://x'"); f.DataScience || f.Network {
		t.Errorf("nothing enabled: %+v", f)
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

// The scan is linear and bounded, whatever the code: 4 MB of distinct
// imports (the largest code a request may send) scans quickly.
func TestScanImportsIsBounded(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 4<<20; i++ {
		fmt.Fprintf(&b, "import m%d; from p%d import q, r\n", i, i)
	}
	b.WriteString("import numpy\n")
	start := time.Now()
	got := ScanImports(b.String())
	if len(got) != maxScanned {
		t.Fatalf("%d names", len(got))
	}
	// A scan miss: the run starts from the basic class and still may
	// import numpy (the policy allows it).
	c := Operator{} // the operator's defaults: nothing enabled, no override
	c.EnableDataScience = true
	pol, _ := c.ResolveImports(nil, nil)
	if f := pol.FeaturesFor(b.String()); f.DataScience {
		t.Errorf("found numpy past the bound")
	}
	if !Allows(pol.Modules, "numpy") {
		t.Errorf("numpy not allowed")
	}
	t.Logf("4 MiB of imports scanned in %v", time.Since(start))
}

func BenchmarkFeaturesFor(b *testing.B) {
	c := Operator{} // the operator's defaults: nothing enabled, no override
	c.EnableDataScience, c.EnableNetwork = true, true
	pol, _ := c.ResolveImports(nil, nil)
	code := strings.Repeat("def f(x):\n    return sum(i * i for i in range(x))\n", 20) + "import numpy as np\nfrom collections import Counter\nprint(np.arange(10).sum())\n"
	b.SetBytes(int64(len(code)))
	for b.Loop() {
		pol.FeaturesFor(code)
	}
}

// SANDBOX_MAX_SANDBOXES bounds every sandbox, the ready ones included: a
// configuration whose pools and spare sessions alone exceed it is refused,
// naming the settings that add up.
func TestReadySandboxesWithinTheBudget(t *testing.T) {
	c := DefaultConfig()
	c.EnableDataScience = true
	c.MaxSandboxes = c.PoolSize + c.DataPoolSize + c.SessionPoolSize
	if err := c.validate(); err != nil {
		t.Fatalf("pools that fit: %v", err)
	}
	c.MaxSandboxes--
	err := c.validate()
	if err == nil || !strings.Contains(err.Error(), "SANDBOX_SESSION_POOL_SIZE") || !strings.Contains(err.Error(), "SANDBOX_MAX_SANDBOXES") {
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
