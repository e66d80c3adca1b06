package runtime

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The production embedding lives in validate.go; the tests carry their own
// so they exercise exactly the file next to them.
//
//go:embed validator.py
var testValidatorSource string

// Profiles as the product defines them (policy/profiles.go), trimmed.
var (
	testBasic    = []string{"math", "json", "re", "random", "collections", "functools", "itertools", "typing", "urllib", "__future__"}
	testProfiles = map[string][]string{
		"basic":        testBasic,
		"data_science": {"numpy", "pandas", "scipy", "matplotlib", "sklearn"},
		"network":      {"urllib.request", "requests", "httpx", "socket", "asyncio"},
		"filesystem":   {"os", "os.path", "pathlib", "shutil", "tempfile", "io"},
	}
	testSettings = map[string]string{
		"data_science": "SANDBOX_ENABLE_DATA_SCIENCE=true",
		"network":      "SANDBOX_ENABLE_NETWORK=true",
		"filesystem":   "SANDBOX_ENABLE_FILESYSTEM=true",
	}
)

// validatorReply is the production type: the tests check what the service
// decodes.
type validatorReply = Validation

// validateReq builds a request: allowed nil switches the policy off.
func validateReq(code string, allowed []string, profile string, enabled ...string) map[string]any {
	profiles := map[string]any{}
	for k, v := range testProfiles {
		profiles[k] = v
	}
	if enabled == nil {
		enabled = []string{}
	}
	return map[string]any{
		"code":             code,
		"allowed_imports":  allowed,
		"profile":          profile,
		"profiles":         profiles,
		"enabled_profiles": enabled,
		"profile_settings": testSettings,
	}
}

// runValidatorFrame runs the validator as production does (fd 3 is one end
// of a socketpair), sends body as one frame (or raw bytes when frame is
// false) and returns the body of the reply frame.
func runValidatorFrame(t *testing.T, body []byte, frame bool) []byte {
	raw, _ := runValidatorTimed(t, body, frame)
	return raw
}

// runValidatorTimed is runValidatorFrame that also gives the CPU time the
// validator used: the measure of its work, whatever else the host runs.
func runValidatorTimed(t *testing.T, body []byte, frame bool) ([]byte, time.Duration) {
	t.Helper()
	if _, err := os.Stat(DefaultInterpreter); err != nil {
		t.Fatalf("no %s (scripts/setup.sh installs it): %v", DefaultInterpreter, err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	parent := os.NewFile(uintptr(fds[0]), "validator-parent")
	child := os.NewFile(uintptr(fds[1]), "validator-child")
	defer parent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, DefaultInterpreter, "-I", "-B", "-X", "utf8", "-c", cellSource+"\n"+testValidatorSource)
	cmd.ExtraFiles = []*os.File{child} // fd 3
	cmd.Env = Env()
	cmd.Dir = "/"
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		child.Close()
		t.Fatal(err)
	}
	child.Close()
	if frame {
		err = writeFrame(parent, body)
	} else {
		_, err = parent.Write(body)
	}
	if err != nil {
		t.Fatalf("write request: %v", err)
	}
	if !frame {
		// A short request: the validator sees EOF where the rest should be.
		_ = syscall.Shutdown(fds[0], syscall.SHUT_WR)
	}
	var raw json.RawMessage
	readErr := readJSONFrame(parent, &raw, MaxReplyBytes)
	waitErr := cmd.Wait()
	if readErr != nil {
		t.Fatalf("read reply: %v (exit %v, output %q)", readErr, waitErr, stderr.String())
	}
	if waitErr != nil || stderr.Len() != 0 {
		t.Fatalf("validator exit %v, output %q", waitErr, stderr.String())
	}
	return raw, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// runValidator sends req and decodes the reply, checking its shape: every
// key present, lists never null.
func runValidator(t *testing.T, req map[string]any) validatorReply {
	rep, _ := runValidatorCPU(t, req)
	return rep
}

// runValidatorCPU is runValidator that also gives the validator's CPU time.
func runValidatorCPU(t *testing.T, req map[string]any) (validatorReply, time.Duration) {
	t.Helper()
	body, err := appendMarshal(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	raw, cpu := runValidatorTimed(t, body, true)
	checkValidatorShape(t, raw)
	var rep validatorReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return rep, cpu
}

func checkValidatorShape(t *testing.T, raw []byte) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatalf("reply is not a JSON object: %v: %.300s", err, raw)
	}
	keys := func(m map[string]json.RawMessage) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if got := keys(top); !slices.Equal(got, []string{"analysis", "recommendations", "syntax_error", "validation"}) {
		t.Fatalf("reply keys %v", got)
	}
	var v, a map[string]json.RawMessage
	if json.Unmarshal(top["validation"], &v) != nil || json.Unmarshal(top["analysis"], &a) != nil {
		t.Fatalf("validation or analysis is not an object: %.300s", raw)
	}
	if got := keys(v); !slices.Equal(got, []string{"errors", "message", "valid", "warnings"}) {
		t.Fatalf("validation keys %v", got)
	}
	want := []string{"character_count", "classes", "estimated_complexity", "functions", "imports", "line_count", "loops", "max_nesting", "required_profiles"}
	if got := keys(a); !slices.Equal(got, want) {
		t.Fatalf("analysis keys %v", got)
	}
	for _, list := range []json.RawMessage{v["errors"], v["warnings"], a["imports"], a["required_profiles"], top["recommendations"]} {
		if !bytes.HasPrefix(list, []byte("[")) {
			t.Fatalf("a list is %s: %.300s", list, raw)
		}
	}
	if se := top["syntax_error"]; string(se) != "null" {
		var s map[string]json.RawMessage
		if json.Unmarshal(se, &s) != nil || !slices.Equal(keys(s), []string{"column", "line", "message", "text"}) {
			t.Fatalf("syntax_error %s", se)
		}
	}
}

func anyContains(list []string, sub string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, sub) })
}

// The seed's example, and the same with the command of its counts.
func TestValidatorSeedExample(t *testing.T) {
	t.Parallel()
	for code, chars := range map[string]int{
		"import os\nos.system('rm -rf /')": 31,
		"import os\nos.system('ls')":       25,
	} {
		rep := runValidator(t, validateReq(code, testBasic, "basic"))
		v, a := rep.Validation, rep.Analysis
		if v.Valid || len(v.Errors) != 1 || !strings.HasPrefix(v.Errors[0], "Line 1: Import 'os' is not allowed") {
			t.Fatalf("%q: validation %+v", code, v)
		}
		if !strings.Contains(v.Errors[0], "in profile basic; it is available in profile filesystem (SANDBOX_ENABLE_FILESYSTEM=true)") ||
			!strings.Contains(v.Errors[0], "operator must enable") {
			t.Errorf("error %q", v.Errors[0])
		}
		if v.Message != "Code contains restricted operations" {
			t.Errorf("message %q", v.Message)
		}
		if !anyContains(v.Warnings, "Line 2: os.system()") {
			t.Errorf("warnings %q", v.Warnings)
		}
		if a.LineCount != 2 || a.CharacterCount != chars || !slices.Equal(a.Imports, []string{"os"}) ||
			!slices.Equal(a.RequiredProfiles, []string{"filesystem"}) || a.EstimatedComplexity != "low" {
			t.Errorf("%q: analysis %+v", code, a)
		}
		if rep.SyntaxError != nil {
			t.Errorf("syntax_error %+v", rep.SyntaxError)
		}
		if !anyContains(rep.Recommendations, `profile="filesystem"`) {
			t.Errorf("recommendations %q", rep.Recommendations)
		}
	}
}

func TestValidatorProfiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ profile, code, module string }{
		{"data_science", "import numpy as np\nnp.zeros(3)", "numpy"},
		{"network", "import requests\nrequests.get('https://example.com').status_code", "requests"},
		{"filesystem", "from pathlib import Path\nPath('/workspace').exists()", "pathlib"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			t.Parallel()
			setting := testSettings[tc.profile]
			// Under basic, not enabled by the operator.
			rep := runValidator(t, validateReq(tc.code, testBasic, "basic"))
			v := rep.Validation
			if v.Valid || len(v.Errors) != 1 {
				t.Fatalf("basic: %+v", v)
			}
			want := fmt.Sprintf("Line 1: Import '%s' is not allowed in profile basic; it is available in profile %s (%s), which the operator must enable first", tc.module, tc.profile, setting)
			if v.Errors[0] != want {
				t.Errorf("error\n got %q\nwant %q", v.Errors[0], want)
			}
			if !slices.Equal(rep.Analysis.RequiredProfiles, []string{tc.profile}) || !slices.Equal(rep.Analysis.Imports, []string{tc.module}) {
				t.Errorf("analysis %+v", rep.Analysis)
			}
			rec := fmt.Sprintf(`Enable profile %s (%s) and request it with profile="%s" to import %s`, tc.profile, setting, tc.profile, tc.module)
			if !slices.Contains(rep.Recommendations, rec) {
				t.Errorf("recommendations %q, want %q", rep.Recommendations, rec)
			}
			// Enabled by the operator: only the request is missing.
			rep = runValidator(t, validateReq(tc.code, testBasic, "basic", tc.profile))
			if v := rep.Validation; v.Valid || len(v.Errors) != 1 || strings.Contains(v.Errors[0], "operator") || !strings.Contains(v.Errors[0], setting) {
				t.Errorf("enabled: %+v", v)
			}
			if !anyContains(rep.Recommendations, fmt.Sprintf(`Request profile %s with profile="%s"`, tc.profile, tc.profile)) {
				t.Errorf("enabled: recommendations %q", rep.Recommendations)
			}
			// Policy off: valid, the profile still reported as needed.
			rep = runValidator(t, validateReq(tc.code, nil, ""))
			if v := rep.Validation; !v.Valid || len(v.Errors) != 0 || v.Message != "Code is valid" {
				t.Errorf("policy off: %+v", v)
			}
			if !slices.Equal(rep.Analysis.RequiredProfiles, []string{tc.profile}) {
				t.Errorf("policy off: required %v", rep.Analysis.RequiredProfiles)
			}
			// The profile in use.
			allowed := append(slices.Clone(testBasic), testProfiles[tc.profile]...)
			rep = runValidator(t, validateReq(tc.code, allowed, "basic+"+tc.profile, tc.profile))
			if v := rep.Validation; !v.Valid || len(v.Errors) != 0 {
				t.Errorf("basic+%s: %+v", tc.profile, v)
			}
		})
	}
	t.Run("nowhere", func(t *testing.T) {
		t.Parallel()
		rep := runValidator(t, validateReq("import math\nimport leftpad\nmath.pi", testBasic, "basic"))
		v := rep.Validation
		if v.Valid || len(v.Errors) != 1 || v.Errors[0] != "Line 2: Import 'leftpad' is not allowed in profile basic; it is not available in any profile" {
			t.Fatalf("%+v", v)
		}
		if len(rep.Analysis.RequiredProfiles) != 0 || !slices.Equal(rep.Analysis.Imports, []string{"leftpad", "math"}) {
			t.Errorf("analysis %+v", rep.Analysis)
		}
	})
	t.Run("dotted entries", func(t *testing.T) {
		t.Parallel()
		// basic has urllib, so urllib.request is allowed (a submodule);
		// network's "urllib.request" is not needed.
		rep := runValidator(t, validateReq("import urllib.request\nimport urllib.parse", testBasic, "basic"))
		if !rep.Validation.Valid || len(rep.Analysis.RequiredProfiles) != 0 || !slices.Equal(rep.Analysis.Imports, []string{"urllib"}) {
			t.Errorf("%+v %+v", rep.Validation, rep.Analysis)
		}
	})
}

func TestValidatorComplexityAndRecommendations(t *testing.T) {
	t.Parallel()
	medium := "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n\n" +
		"def spread(xs):\n    m = mean(xs)\n    out = []\n    for x in xs:\n        if x > m:\n            out.append(x - m)\n        else:\n            out.append(m - x)\n    return out\n\nprint(spread([1, 2, 3]))\n"
	for code, want := range map[string]string{
		"x = 1\nprint(x)\n":                 "low",
		medium:                              "medium",
		bigProgram(4000):                    "high",
		"def f(): pass\nclass C: pass\nf()": "low",
	} {
		rep := runValidator(t, validateReq(code, testBasic, "basic"))
		if got := rep.Analysis.EstimatedComplexity; got != want {
			t.Errorf("complexity %s, want %s: %+v\n%s", got, want, rep.Analysis, code)
		}
	}
	rep := runValidator(t, validateReq("data = [1, 2, 3]\ntotal = sum(data)\nwith open('out.txt', 'w') as f:\n    f.write(str(total))\n", testBasic, "basic"))
	if a := rep.Analysis; a.Functions != 0 || a.Classes != 0 || a.Loops != 0 || a.MaxNesting != 1 {
		t.Errorf("analysis %+v", a)
	}
	if !anyContains(rep.Validation.Warnings, "Line 3: open() accesses the filesystem") {
		t.Errorf("warnings %q", rep.Validation.Warnings)
	}
	for _, want := range []string{"/workspace", "Print results or end with an expression"} {
		if !anyContains(rep.Recommendations, want) {
			t.Errorf("recommendations %q lack %q", rep.Recommendations, want)
		}
	}
	// Output and a last expression each make the print advice moot.
	for _, code := range []string{"x = 1\nx", "import sys\nsys.stdout.write('hi')\nx = 1"} {
		rep := runValidator(t, validateReq(code, nil, ""))
		if len(rep.Recommendations) != 0 {
			t.Errorf("%q: recommendations %q", code, rep.Recommendations)
		}
	}
	// Counts in a class, methods and comprehensions.
	rep = runValidator(t, validateReq("class A:\n    def f(self):\n        return {k: v for k in range(3) for v in range(k)}\n    async def g(self):\n        while self:\n            break\n", nil, ""))
	if a := rep.Analysis; a.Classes != 1 || a.Functions != 2 || a.Loops != 3 || a.MaxNesting != 3 {
		t.Errorf("analysis %+v", a)
	}
}

// Whatever arrives, the validator answers with one well-formed frame.
func TestValidatorAlwaysReplies(t *testing.T) {
	t.Parallel()
	list, _ := appendMarshal(nil, []string{"not", "a", "dict"})
	badCode, _ := appendMarshal(nil, map[string]any{"code": 5})
	weird, _ := appendMarshal(nil, map[string]any{"code": "import os\nimport numpy", "allowed_imports": []string{"math"},
		"profiles": map[string]any{"data_science": "numpy", "x": nil}, "profile_settings": []string{"?"}, "enabled_profiles": "all"})
	short := binary.BigEndian.AppendUint32(nil, 100)
	for name, tc := range map[string]struct {
		body     []byte
		frame    bool
		internal bool
	}{
		"not a dict":      {list, true, true},
		"code not str":    {badCode, true, true},
		"not marshal":     {[]byte("{json?}"), true, true},
		"truncated":       {append(short, "abc"...), false, true},
		"odd fields":      {weird, true, false},
		"minimal":         {mustMarshal(t, map[string]any{"code": "print(1)"}), true, false},
		"no frame at all": {nil, false, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := runValidatorFrame(t, tc.body, tc.frame)
			checkValidatorShape(t, raw)
			var rep validatorReply
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatal(err)
			}
			if tc.internal {
				if rep.Validation.Valid || rep.Validation.Message != "Internal error" || !anyContains(rep.Validation.Errors, "Internal error") {
					t.Errorf("%+v", rep.Validation)
				}
			} else if rep.Validation.Message == "Internal error" {
				t.Errorf("%+v", rep.Validation)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := appendMarshal(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An indented cell, as programs send template strings, is valid: the
// validator judges it dedented, as the harness runs it.
func TestValidatorDedentsAsTheHarnessRuns(t *testing.T) {
	rep := runValidator(t, validateReq("    x = 1\n    if x:\n        print(x)\n", nil, ""))
	if !rep.Validation.Valid || rep.Analysis.LineCount != 3 {
		t.Fatalf("an indented cell: %+v %+v", rep.Validation, rep.Analysis)
	}
}

// A cell with magics and shell escapes is valid as the harness runs it:
// cell.py makes each line a call before either compiles it.
func TestValidatorReadsMagicsAsTheHarnessRuns(t *testing.T) {
	rep := runValidator(t, validateReq("!ls -la\n%pip install requests\nx = 1\nif x:\n    %time x + 1\n", nil, ""))
	if !rep.Validation.Valid || rep.Analysis.LineCount != 5 {
		t.Fatalf("a cell with magics: %+v %+v", rep.Validation, rep.Analysis)
	}
	rep = runValidator(t, validateReq("%%bash\necho hi\n", nil, ""))
	if !rep.Validation.Valid {
		t.Fatalf("a cell magic: %+v", rep.Validation)
	}
}
