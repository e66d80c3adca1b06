package e2b

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// readTemplate is a template as the pinned SDK serializes it
// (testdata/gen-templates.mjs wrote them with e2b 2.51.0's Template.toJSON).
func readTemplate(t *testing.T, name string) templateSpec {
	t.Helper()
	raw, err := os.ReadFile("testdata/templates/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var spec templateSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// Each sample template becomes the chain of environment builds the
// design names: a Debian base with no aptInstall is the host's root,
// aptInstall a Debian build, pipInstall a requirements layer over the
// stage before, runCmd and copy a Dockerfile FROM it, the metadata on
// the last stage.
func TestTemplatePlans(t *testing.T) {
	const pre = "mytpl.b01234567"
	copyHash := readTemplate(t, "python-copy-run").Steps[0].FilesHash
	exists := func(n string) bool { return n == "mybase" }
	for name, want := range map[string][]service.EnvironmentBuild{
		"debian-pip-env": {{Name: "mytpl", Requirements: []string{"cagetplprobe==1.0"}, Vars: map[string]string{"A": "1"}}},
		"apt-pip": {
			{Name: pre + ".1", Debian: []string{"python3", "curl", "jq"}, Suite: "bookworm"},
			{Name: "mytpl", Requirements: []string{"six"}, Base: pre + ".1"},
		},
		"python-copy-run": {
			{Name: pre + ".1", Debian: []string{"python3"}},
			{Name: "mytpl", Dockerfile: "FROM " + pre + ".1\n" +
				`COPY --chmod=0644 ["` + copyHash + `/folder/*","folder"]` + "\n" +
				`RUN ["/bin/sh","-c","cat folder/test.txt"]` + "\n" +
				`WORKDIR "/app"` + "\n" + `ENV B="two"` + "\n",
				StartCmd: "echo hi", ReadyCmd: "sleep 1", Workdir: "/app", Vars: map[string]string{"B": "two"}},
		},
		"image-run": {{Name: "mytpl", Dockerfile: "FROM ghcr.io/example/img:1\n" + `RUN ["/bin/sh","-c","echo a \u0026\u0026 echo b"]` + "\n"}},
		"image-pip": {
			{Name: pre + ".1", Image: "ghcr.io/example/img:1"},
			{Name: "mytpl", Requirements: []string{"x"}, Base: pre + ".1"},
		},
		"template-pip": {{Name: "mytpl", Requirements: []string{"y"}, Base: "mybase"}},
		"base-env":     {{Name: "mytpl", ReadyCmd: "true", Vars: map[string]string{"C": "3"}}},
	} {
		stages, err := plan(readTemplate(t, name), "mytpl", pre, exists)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var got []service.EnvironmentBuild
		for _, st := range stages {
			got = append(got, st.Build)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	// The copy's stage names its upload, which the build context holds.
	stages, _ := plan(readTemplate(t, "python-copy-run"), "mytpl", pre, exists)
	if got := stages[1].Copies; len(got) != 1 || got[0] != copyHash {
		t.Errorf("copies %v, want [%s]", got, copyHash)
	}
}

// What codecage cannot build is refused with E2B's reason: the message
// names the step, and the step is the one the SDK points its BuildError
// at ("base", or the step's index from 1).
func TestTemplatePlanRefusals(t *testing.T) {
	for name, want := range map[string]struct{ step, says string }{
		"npm":           {"1", "npmInstall"},
		"user-root":     {"1", `setUser("root")`},
		"apt-after-run": {"2", "aptInstall is supported only right after"},
		"no-template":   {"base", `template "nope" not found`},
		"registry":      {"base", "registry credentials"},
		"aws":           {"base", "fromAWSRegistry"},
		"apt-on-image":  {"1", "aptInstall is supported only right after"},
		"pip-project":   {"1", "the copied project"},
	} {
		_, err := plan(readTemplate(t, name), "mytpl", "mytpl.b01234567", func(string) bool { return false })
		se, ok := err.(*stepError)
		if !ok || se.Step != want.step || !strings.Contains(se.Message, want.says) {
			t.Errorf("%s: %#v, want step %s saying %q", name, err, want.step, want.says)
		}
	}
	bad := map[string]templateStep{
		"env newline": {Type: "ENV", Args: []string{"A", "x\ny"}},
		"env name":    {Type: "ENV", Args: []string{"A=B", "x"}},
		"copy up":     {Type: "COPY", Args: []string{"../etc", "/x"}, FilesHash: strings.Repeat("a", 64)},
		"copy nohash": {Type: "COPY", Args: []string{"a", "/x"}},
		"run as bob":  {Type: "RUN", Args: []string{"true", "bob"}},
		"unknown":     {Type: "HEALTHCHECK"},
		"long arg":    {Type: "RUN", Args: []string{strings.Repeat("x", maxStepArg+1)}},
		"apt version": {Type: "RUN", Args: []string{aptPrefix + "curl=7.0"}},
		"pip option":  {Type: "RUN", Args: []string{"pip install -r req.txt"}},
	}
	for name, st := range bad {
		_, err := plan(templateSpec{FromImage: "debian:stable", Steps: []templateStep{st}}, "t", "t.b01234567", func(string) bool { return false })
		if se, ok := err.(*stepError); !ok || se.Step != "1" {
			t.Errorf("%s: %#v, want a refusal at step 1", name, err)
		}
	}
	many := templateSpec{Steps: make([]templateStep, maxTemplateSteps+1)}
	if _, err := plan(many, "t", "t.b01234567", func(string) bool { return false }); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("too many steps: %v", err)
	}
}

// The build's log keeps offsets stable past its caps: lines beyond them
// are counted, and the last entry says how many were not kept.
func TestTemplateBuildLogCaps(t *testing.T) {
	b := &templateBuild{status: statusBuilding}
	long := strings.Repeat("y", 3*maxLogLine)
	_, _ = b.Write([]byte("first\nsec"))
	_, _ = b.Write([]byte("ond\n" + long + "\n"))
	for i := 0; i < maxLogEntries+10; i++ {
		_, _ = b.Write([]byte("line\n"))
	}
	_, first, _ := b.page(0, 3)
	if len(first) != 3 || first[0].Message != "first" || first[1].Message != "second" || len(first[2].Message) > maxLogLine+len("…") {
		t.Fatalf("first entries %+v", first)
	}
	b.finish(&stepError{Step: "2", Message: "it broke"})
	status, tail, reason := b.page(maxLogEntries-1, 100)
	if status != statusError || reason == nil || reason.Step != "2" || len(tail) != 3 ||
		!strings.Contains(tail[1].Message, "lines of the build's log were not kept") || tail[2].Message != "it broke" || tail[2].Level != "error" {
		t.Fatalf("tail %s %+v %+v", status, tail, reason)
	}
	if _, rest, _ := b.page(maxLogEntries+2, 100); len(rest) != 0 {
		t.Fatalf("past the end: %+v", rest)
	}
	if _, rest, _ := b.page(-5, 2); len(rest) != 2 {
		t.Fatalf("negative offset: %+v", rest)
	}
}
