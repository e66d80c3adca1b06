package service_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// allProfilesService enables every profile, as an operator would.
func allProfilesService(t *testing.T) *service.Service {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.EnableDataScience, cfg.EnableNetwork, cfg.EnableFilesystem = true, true, true
	return newServiceWith(t, cfg)
}

func execute(t *testing.T, svc *service.Service, req service.Request) *service.Result {
	t.Helper()
	if req.Timeout == 0 {
		req.Timeout = 60 * time.Second
	}
	res, err := svc.Execute(context.Background(), req)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	return res
}

func TestProfilesAllowAndRefuse(t *testing.T) {
	svc := allProfilesService(t)
	cases := []struct {
		profiles []string
		allowed  string // imported, must work
		refused  string // must fail with an ImportError naming the fix
		hint     string
	}{
		// No profile named: every enabled profile's modules.
		{nil, "import math, sys, json, re, collections, numpy, os, pathlib, urllib.request, socket", "import ctypes", "not available in any profile"},
		{[]string{"basic"}, "import math, statistics, json, re, collections, datetime, urllib.parse, sys, io, typing", "import os", `profile filesystem (request profile "filesystem")`},
		{[]string{"data_science"}, "import numpy, pandas, scipy, matplotlib.pyplot, sympy, sklearn", "import socket", `profile network (request profile "network")`},
		{[]string{"filesystem"}, "import os, pathlib, tempfile, shutil, glob, zipfile, tarfile", "import numpy", `profile data_science (request profile "data_science")`},
		{[]string{"network"}, "import urllib.request, http.client, socket, ssl, email", "import pathlib", `profile filesystem`},
		{[]string{"basic", "filesystem"}, "import math, os", "import ctypes", "not available in any profile"},
	}
	for _, c := range cases {
		res := execute(t, svc, service.Request{Code: c.allowed, Profiles: c.profiles})
		if !res.Success {
			t.Errorf("%v: %q failed: %+v", c.profiles, c.allowed, res.Error)
		}
		res = execute(t, svc, service.Request{Code: c.refused, Profiles: c.profiles})
		if res.Error == nil || res.Error.Type != "ImportError" || !strings.Contains(res.Error.Message, c.hint) {
			t.Errorf("%v: %q: want an ImportError with %q, got %+v", c.profiles, c.refused, c.hint, res.Error)
		}
	}
}

// Enabled means usable: a request that names no profile may import the
// modules of every profile the operator enabled, and starts from the warm
// class its code's imports call for (numpy preloaded, its memory default),
// or the basic one, as fast as ever, when it imports nothing of theirs.
func TestEnabledProfilesNeedNoName(t *testing.T) {
	cfg := config.DefaultConfig() // the data_science pool is under test
	cfg.EnableDataScience, cfg.EnableFilesystem = true, true
	svc := newServiceWith(t, cfg)
	basic, data := policy.Basic, policy.DataScience
	if onGVisor() {
		basic, data = "gvisor/"+basic, "gvisor/"+data
	}
	served := func(class string) int64 {
		st := svc.PoolStats()[class]
		return st.Hits + st.Misses
	}
	cases := []struct {
		code, class, result string
	}{
		// 300 MB is far over the basic default of 128 MiB: numpy's run has
		// the data_science memory default.
		{"import numpy as np\nx = np.ones(300 * 2**20 // 8)\nint(x.sum())", data, "39321600"},
		{"import pandas as pd\nint(pd.Series([1, 2, 3]).sum())", data, "6"},
		{"import sys, math\nmath.isqrt(sys.maxsize)", basic, "3037000499"},
		{"import os\nos.getcwd()", basic, `"/workspace"`},
		// Found by the code's imports, not by luck: a miss loads numpy late.
		{"import importlib\nnp = importlib.import_module('num' + 'py')\nint(np.arange(4).sum())", basic, "6"},
	}
	for _, c := range cases {
		b0, d0 := served(basic), served(data)
		// The default timeout: a run allowed more CPU time than a pooled
		// sandbox was started with gets a fresh one.
		res := execute(t, svc, service.Request{Code: c.code, Timeout: cfg.Timeout})
		if !res.Success || string(res.Result) != c.result {
			t.Errorf("%q: %s %+v %s", c.code, res.Result, res.Error, res.Stderr)
			continue
		}
		got := map[string]int64{basic: served(basic) - b0, data: served(data) - d0}
		if got[c.class] != 1 || got[basic]+got[data] != 1 {
			t.Errorf("%q: served by %v, want %s", c.code, got, c.class)
		}
	}
	// A basic run keeps the basic memory default.
	if res := execute(t, svc, service.Request{Code: "x = bytearray(300 * 2**20)"}); res.Limit == nil || *res.Limit != "memory" {
		t.Errorf("basic memory default: %+v", res)
	}
	// Naming a profile narrows the run to it, and the error says how to
	// get the rest.
	res := execute(t, svc, service.Request{Code: "import numpy", Profiles: []string{"basic"}})
	if res.Error == nil || !strings.Contains(res.Error.Message, `profile data_science (request profile "data_science")`) {
		t.Errorf("basic named: %+v", res.Error)
	}
	// get_sandbox_info says what a request without profile gets.
	if got := svc.Info().DefaultProfiles; strings.Join(got, ",") != "basic,data_science,filesystem" {
		t.Errorf("info default_profiles %v", got)
	}
	// A session without profile has them all too (and numpy's memory).
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, se.ID, "o")
	if strings.Join(se.Profiles, ",") != "basic,data_science,filesystem" {
		t.Errorf("session profiles %v", se.Profiles)
	}
	res, err = svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: "import numpy as np, os\nx = np.ones(300 * 2**20 // 8)\nint(x.sum())"})
	if err != nil || !res.Success || string(res.Result) != "39321600" {
		t.Errorf("session: %v %+v", err, res)
	}
	// SANDBOX_DEFAULT_PROFILES still decides when the operator sets it.
	cfg.DefaultProfiles = []string{"basic"}
	narrow := newServiceWith(t, cfg)
	if res := execute(t, narrow, service.Request{Code: "import numpy"}); res.Error == nil || res.Error.Type != "ImportError" {
		t.Errorf("SANDBOX_DEFAULT_PROFILES=basic: %+v", res.Error)
	}
}

// Every module of the basic profile imports under the defaults (where this
// host's Python has it).
func TestEveryBasicModuleImports(t *testing.T) {
	svc := newPolicyService(t)
	names, _ := json.Marshal(policy.BasicModules)
	res := execute(t, svc, service.Request{Code: fmt.Sprintf(`missing, failed = [], []
for m in %s:
    try:
        exec("import " + m)
    except Exception as e:
        (missing if type(e) is ModuleNotFoundError else failed).append("%%s: %%s" %% (m, e))
print(missing)
failed`, names)})
	if !res.Success || string(res.Result) != "[]" {
		t.Fatalf("failed %s %+v", res.Result, res.Error)
	}
	// Only optional third-party names may be absent from a Debian host.
	if out := strings.TrimSpace(res.Stdout); out != "[]" && out != `["typing_extensions: No module named 'typing_extensions'"]` {
		t.Errorf("missing: %s", out)
	}
}

func TestImportErrorNamesTheSetting(t *testing.T) {
	svc := newPolicyService(t)
	res := execute(t, svc, service.Request{Code: "import os"})
	want := "Import of 'os' is not allowed in profile basic; it is available in profile filesystem (SANDBOX_ENABLE_FILESYSTEM=true)"
	if res.Error == nil || res.Error.Message != want {
		t.Fatalf("message %+v, want %q", res.Error, want)
	}
	res = execute(t, svc, service.Request{Code: "from urllib import request"})
	if res.Error == nil || !strings.Contains(res.Error.Message, "urllib.request") {
		t.Fatalf("submodule through from-import: %+v", res.Error)
	}
}

func TestStdlibInternalsStillImportOS(t *testing.T) {
	svc := newPolicyService(t)
	// Each of these imports os, sys or io internally: that is not the user's import.
	res := execute(t, svc, service.Request{Code: `import uuid, hashlib, random, datetime, decimal, csv, json, zoneinfo, calendar, textwrap, difflib
str(uuid.UUID(int=5)), hashlib.sha256(b"x").hexdigest()[:8], calendar.isleap(2024)`})
	if !res.Success || string(res.Result) != `["00000000-0000-0000-0000-000000000005","2d711642",true]` {
		t.Fatalf("%s %+v", res.Result, res.Error)
	}
}

func TestRequestAskingForMoreThanAllowed(t *testing.T) {
	svc := newPolicyService(t)
	cases := map[string]service.Request{
		"SANDBOX_ENABLE_DATA_SCIENCE=true": {Code: "1", Profiles: []string{"data_science"}},
		"SANDBOX_ENABLE_FILESYSTEM=true":   {Code: "1", AllowedImports: []string{"os"}},
		"SANDBOX_ALLOWED_IMPORTS=*":        {Code: "1", AllowedImports: []string{"*"}},
		"unknown profile":                  {Code: "1", Profiles: []string{"gpu"}},
	}
	for want, req := range cases {
		_, err := svc.Execute(context.Background(), req)
		if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("want an invalid-request error naming %s, got %v", want, err)
		}
	}
}

func TestOperatorOverride(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{"math", "os"}
	svc := newServiceWith(t, cfg)
	if res := execute(t, svc, service.Request{Code: "import math, os\nos.getcwd()"}); !res.Success || string(res.Result) != `"/workspace"` {
		t.Fatalf("override allows os: %s %+v", res.Result, res.Error)
	}
	if res := execute(t, svc, service.Request{Code: "import json"}); res.Error == nil || res.Error.Type != "ImportError" {
		t.Fatalf("override must replace the basic list: %+v", res.Error)
	}
}

func TestNumpyAndPandasGiveTheRightNumbers(t *testing.T) {
	svc := allProfilesService(t)
	res := execute(t, svc, service.Request{Profiles: []string{"data_science"}, Code: `import numpy as np, pandas as pd
a = np.arange(10**6)
df = pd.DataFrame({"k": ["a", "b", "a", "b"], "v": [1, 2, 3, 5]})
m = df.groupby("k")["v"].mean()
inv = np.linalg.inv(np.array([[2.0, 0], [0, 4.0]]))
[int(a.sum()), float(m["a"]), float(m["b"]), inv.tolist()]`})
	if !res.Success || string(res.Result) != "[499999500000,2.0,3.5,[[0.5,0.0],[0.0,0.25]]]" {
		t.Fatalf("result %s error %+v stderr %s", res.Result, res.Error, res.Stderr)
	}
}

func TestPlotComesBackAsPNG(t *testing.T) {
	svc := allProfilesService(t)
	res := execute(t, svc, service.Request{Profiles: []string{"data_science"}, Code: `import matplotlib.pyplot as plt
fig = plt.figure(figsize=(4, 3), dpi=100)
plt.plot([1, 2, 3], [1, 4, 9])
plt.show()
plt.figure(figsize=(2, 2), dpi=50)
plt.bar(["a", "b"], [3, 5])`})
	if !res.Success || len(res.Images) != 2 {
		t.Fatalf("images %d, error %+v, stderr %q", len(res.Images), res.Error, res.Stderr)
	}
	if strings.Contains(res.Stderr, "non-interactive") {
		t.Errorf("plt.show() warned: %q", res.Stderr)
	}
	sizes := [][2]int{{400, 300}, {100, 100}}
	for i, img := range res.Images {
		raw, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil || img.MIMEType != "image/png" {
			t.Fatalf("image %d: %v %s", i, err, img.MIMEType)
		}
		p, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("image %d is not a PNG: %v", i, err)
		}
		if b := p.Bounds(); b.Dx() != sizes[i][0] || b.Dy() != sizes[i][1] {
			t.Errorf("image %d is %dx%d, want %v", i, b.Dx(), b.Dy(), sizes[i])
		}
	}
	// No figure, no image; and a run without matplotlib says nothing.
	if res := execute(t, svc, service.Request{Code: "1", Profiles: []string{"data_science"}}); len(res.Images) != 0 {
		t.Fatalf("images without a figure: %d", len(res.Images))
	}
}

// Figures past the count limit are left out as those past the size
// limit are: named in stderr, never silently (issue 24, item 19).
func TestFiguresPastTheCountLimitAreReported(t *testing.T) {
	svc := allProfilesService(t)
	res := execute(t, svc, service.Request{Profiles: []string{"data_science"}, Code: `import matplotlib.pyplot as plt
for i in range(13):
    plt.figure(figsize=(1, 1), dpi=20)
    plt.plot([0, i])`})
	if !res.Success || len(res.Images) != 10 {
		t.Fatalf("images %d, error %+v, stderr %q", len(res.Images), res.Error, res.Stderr)
	}
	want := "codecage: 3 figures left out (11, 12, 13): at most 10 are returned\n"
	if !strings.Contains(res.Stderr, want) {
		t.Fatalf("stderr %q does not report the figures left out (%q)", res.Stderr, want)
	}
	// Ten figures: nothing to report.
	res = execute(t, svc, service.Request{Profiles: []string{"data_science"}, Code: `import matplotlib.pyplot as plt
for i in range(10):
    plt.figure(figsize=(1, 1), dpi=20)`})
	if len(res.Images) != 10 || strings.Contains(res.Stderr, "left out") {
		t.Fatalf("images %d, stderr %q", len(res.Images), res.Stderr)
	}
}

func TestDataScienceGetsItsOwnMemoryDefault(t *testing.T) {
	svc := allProfilesService(t)
	// 300 MB would be far over the basic default of 128 MiB.
	res := execute(t, svc, service.Request{Profiles: []string{"data_science"}, Code: "import numpy as np\nx = np.ones(300 * 2**20 // 8)\nfloat(x.sum())"})
	if !res.Success {
		t.Fatalf("data_science default memory too small: %+v", res.Error)
	}
	res = execute(t, svc, service.Request{Code: "x = bytearray(300 * 2**20)"})
	if res.Limit == nil || *res.Limit != "memory" {
		t.Fatalf("basic default memory not applied: %+v", res)
	}
}

func TestFilesystemProfileWorksInTheWorkspace(t *testing.T) {
	svc := allProfilesService(t)
	res := execute(t, svc, service.Request{Profiles: []string{"filesystem"}, Code: `import pathlib, tempfile, shutil, glob, zipfile, tarfile, os
w = pathlib.Path("/workspace")
(w / "a.txt").write_text("hello")
shutil.copy(w / "a.txt", w / "b.txt")
with zipfile.ZipFile(w / "x.zip", "w") as z: z.write(w / "a.txt", "a.txt")
with tarfile.open(w / "x.tar", "w") as t: t.add(w / "b.txt", "b.txt")
with tempfile.NamedTemporaryFile(dir=w) as f: f.write(b"t")
denied = []
for p in ("/usr/x", "/etc/x", "/x"):
    try:
        open(p, "w")
    except OSError as e:
        denied.append(e.errno)
[sorted(os.path.basename(p) for p in glob.glob("/workspace/*")), zipfile.ZipFile(w / "x.zip").read("a.txt").decode(), len(denied)]`})
	if !res.Success || string(res.Result) != `[["a.txt","b.txt","x.tar","x.zip"],"hello",3]` {
		t.Fatalf("%s %+v", res.Result, res.Error)
	}
}

func TestInfoMatchesTheConfiguration(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.EnableDataScience = true
	cfg.Timeout = 12 * time.Second
	cfg.MemoryLimit = 200 << 20
	cfg.NetworkAllow = []string{"example.com"}
	info := newServiceWith(t, cfg).Info()
	if !info.Success || !info.SecurityProfiles["basic"].Enabled || !info.SecurityProfiles["data_science"].Enabled || info.SecurityProfiles["network"].Enabled {
		t.Fatalf("profiles %+v", info.SecurityProfiles)
	}
	if info.SecurityProfiles["network"].Setting != "SANDBOX_ENABLE_NETWORK" {
		t.Errorf("network setting %q", info.SecurityProfiles["network"].Setting)
	}
	l := info.ResourceLimits
	if l.Timeout != 12 || l.MemoryLimit != "200m" || l.MaxOutputSize != 1<<20 || l.MaxTimeout != 300 {
		t.Fatalf("limits %+v", l)
	}
	if info.Isolation.Backend != "native" || !strings.HasPrefix(info.Isolation.PythonVersion, "3.") || !info.Isolation.Seccomp {
		t.Fatalf("isolation %+v", info.Isolation)
	}
	if info.ContainerMode.Enabled || info.Network.Enabled || info.Network.Allow[0] != "example.com" {
		t.Fatalf("container %+v network %+v", info.ContainerMode, info.Network)
	}
	if info.Commands.Backend != "native" || len(info.Commands.Allowed) == 0 {
		t.Fatalf("commands %+v", info.Commands)
	}
}

// egressServers starts two host servers: srv answers "hello from the host"
// and counts its requests; other, which no allow list names, fails the
// test if anything reaches it.
func egressServers(t *testing.T) (srv, other *httptest.Server, hits *atomic.Int32) {
	t.Helper()
	hits = &atomic.Int32{}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "hello from the host")
	}))
	t.Cleanup(srv.Close)
	other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the unlisted server was reached: %s", r.URL)
	}))
	t.Cleanup(other.Close)
	return srv, other, hits
}

func TestNetworkProfileGoesThroughTheEgressProxy(t *testing.T) {
	srv, other, hits := egressServers(t)
	addr := strings.TrimPrefix(srv.URL, "http://")
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{addr}
	svc := newServiceWith(t, cfg)
	res := execute(t, svc, service.Request{Profiles: []string{"network"}, Code: fmt.Sprintf(`import urllib.request, urllib.error, socket
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return e.code
    except OSError as e:
        return type(e).__name__
def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=3)
        return "connected"
    except OSError as e:
        return e.errno
import requests
[get("%s/x"), get("%s/"), get("http://10.1.2.3/"), get("http://169.254.169.254/latest/meta-data/"), direct("127.0.0.1", %s), direct("1.1.1.1", 443),
 requests.get("%s/r", timeout=10).text]`,
		srv.URL, other.URL, strings.Split(addr, ":")[1], srv.URL)})
	if !res.Success {
		t.Fatalf("%+v stderr %s", res.Error, res.Stderr)
	}
	var got []any
	if err := json.Unmarshal(res.Result, &got); err != nil || len(got) != 7 {
		t.Fatalf("result %s", res.Result)
	}
	if got[0] != "hello from the host" || got[6] != "hello from the host" || hits.Load() != 2 {
		t.Errorf("listed server: urllib %v, requests %v (hits %d)", got[0], got[6], hits.Load())
	}
	for i, what := range []string{"unlisted server", "private address", "metadata address"} {
		if got[i+1] != float64(403) {
			t.Errorf("%s: %v, want 403 from the proxy", what, got[i+1])
		}
	}
	for i, what := range []string{"direct socket to the listed host:port", "direct socket to a public address"} {
		if got[i+4] == "connected" {
			t.Errorf("%s connected", what)
		}
	}
	// Without the network profile there is no proxy at all.
	res = execute(t, svc, service.Request{Profiles: []string{"basic"}, Code: "import os\n1"})
	if res.Error == nil {
		t.Fatal("basic run imported os")
	}
}

// With the network profile enabled, code that names no profile reaches the
// allowed hosts through the egress proxy when it imports a network module
// (or names a URL), and so does a session opened without profile, whose
// proxy lives as long as its sandbox and whose refusals are its runs'
// security events.
func TestNetworkProfileNeedsNoName(t *testing.T) {
	srv, other, hits := egressServers(t)
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{strings.TrimPrefix(srv.URL, "http://")}
	svc := newServiceWith(t, cfg)
	rec := &recorder{}
	svc.SetObserver(rec)
	get := fmt.Sprintf(`import urllib.request, urllib.error
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return e.code
[get(%q), get(%q)]`, srv.URL+"/a", other.URL+"/b")
	res := execute(t, svc, service.Request{Code: get})
	if !res.Success || string(res.Result) != `["hello from the host",403]` {
		t.Fatalf("stateless: %s %+v %s", res.Result, res.Error, res.Stderr)
	}
	// A run that shows no sign of the network starts from the basic pool.
	before := svc.PoolStats()[policy.Basic]
	if res := execute(t, svc, service.Request{Code: "import json\njson.dumps([1])", Timeout: cfg.Timeout}); !res.Success {
		t.Fatalf("plain run: %+v", res.Error)
	}
	if after := svc.PoolStats()[policy.Basic]; !onGVisor() && after.Hits+after.Misses != before.Hits+before.Misses+1 {
		t.Errorf("plain run did not come from the basic pool: %+v -> %+v", before, after)
	}

	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run: the proxy outlives a request
		res, err = svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: get})
		if err != nil || !res.Success || string(res.Result) != `["hello from the host",403]` {
			t.Fatalf("session: %v %s %+v", err, res.Result, res.Error)
		}
	}
	// And after a restart, on its new sandbox.
	if _, err := svc.RestartSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	res, err = svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: get})
	if err != nil || !res.Success || string(res.Result) != `["hello from the host",403]` {
		t.Fatalf("restarted session: %v %s %+v", err, res.Result, res.Error)
	}
	if err := svc.CloseSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	if n := hits.Load(); n != 4 {
		t.Errorf("the allowed server saw %d requests, want 4", n)
	}
	rec.mu.Lock()
	denied := 0
	for _, ev := range rec.evs {
		for _, se := range ev.SecurityEvents {
			if strings.HasPrefix(se, "egress_denied:127.0.0.1") {
				denied++
			}
		}
	}
	rec.mu.Unlock()
	if denied != 4 {
		t.Errorf("%d egress_denied security events, want 4 (one per run)", denied)
	}
}

func TestValidateRunsTheAnalyzerInASandbox(t *testing.T) {
	svc := newPolicyService(t)
	v, err := svc.Validate(context.Background(), service.ValidateRequest{Code: "import os\nos.system('ls')"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Validation.Valid || len(v.Validation.Errors) == 0 || !strings.HasPrefix(v.Validation.Errors[0], "Line 1: Import 'os' is not allowed") {
		t.Fatalf("validation %+v", v.Validation)
	}
	if v.Analysis.LineCount != 2 || v.Analysis.CharacterCount != 25 {
		t.Fatalf("analysis %+v", v.Analysis)
	}
	v, err = svc.Validate(context.Background(), service.ValidateRequest{Code: "def f(:\n  pass"})
	if err != nil || v.SyntaxError == nil || *v.SyntaxError.Line != 1 || v.Validation.Valid {
		t.Fatalf("syntax error: %v %+v", err, v)
	}
	v, err = svc.Validate(context.Background(), service.ValidateRequest{Code: "x = eval(input())\nprint(x)"})
	if err != nil || !v.Validation.Valid || len(v.Validation.Warnings) == 0 {
		t.Fatalf("warnings: %v %+v", err, v.Validation)
	}
	if _, err := svc.Validate(context.Background(), service.ValidateRequest{Code: "1", Profiles: []string{"network"}}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a disabled profile must be refused: %v", err)
	}
}
