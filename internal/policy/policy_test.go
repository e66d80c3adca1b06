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
