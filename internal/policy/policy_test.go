package policy

import (
	"errors"
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
	c := DefaultConfig()
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
	pol, err = c.ResolveImports(nil, nil)
	if err != nil || Allows(pol.Modules, "os") || pol.Hints["os"] != `it is available in profile filesystem (request profile "filesystem")` {
		t.Fatalf("enabled but not requested: %v %q", err, pol.Hints["os"])
	}
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
