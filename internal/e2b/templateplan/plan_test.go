package templateplan

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

// readTemplate is a template as the pinned SDK serializes it
// (testdata/gen-templates.mjs wrote them with e2b 2.51.0's Template.toJSON).
func readTemplate(t *testing.T, name string) Spec {
	t.Helper()
	raw, err := os.ReadFile("../testdata/templates/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var spec Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// lookupOf answers the planner's lookups from a fixed set.
func lookupOf(envs ...envstore.Env) Lookup {
	return func(n string) (envstore.Env, bool) {
		for _, e := range envs {
			if e.Name == n {
				return e, true
			}
		}
		return envstore.Env{}, false
	}
}

// Each sample template becomes the chain of environment builds the
// design names: a Debian base with no aptInstall is the host's root,
// aptInstall a Debian build (shared by every template asking for the same
// release and packages), runCmd and copy a Dockerfile FROM the root so
// far (the host's root being no image, its Debian twin), pipInstall one
// requirements layer over the root, built last; the metadata on the last
// stage; a template that builds nothing of its own copies its root.
func TestTemplatePlans(t *testing.T) {
	const pre = "mytpl.b01234567"
	copyHash := readTemplate(t, "python-copy-run").Steps[0].FilesHash
	twin := debianStageName("", []string{"python3"})
	// The root a packages layer goes on has pip, which installs it.
	aptPip := []string{"curl", "jq", "python3", "python3-pip"}
	// E2B's base has pip and Node.js, as the host's root it stands for:
	// a Debian root built in its place has them too.
	e2bTwin := []string{"nodejs", "python3", "python3-pip"}
	mastra := []string{"fuse", "nodejs", "python3", "python3-pip", "s3fs"}
	// E2B's code interpreter has the data-science packages too.
	interp := []string{"curl", "nodejs", "python3", "python3-matplotlib", "python3-numpy", "python3-pandas", "python3-pip", "python3-requests", "python3-scipy", "python3-sklearn", "python3-sympy"}
	exists := lookupOf(envstore.Env{Name: "mybase", RootDir: "/r"})
	for name, want := range map[string][]service.EnvironmentBuild{
		"debian-pip-env": {{Name: "mytpl", Requirements: []string{"cagetplprobe==1.0"}, Vars: map[string]string{"A": "1"}}},
		"apt-pip": {
			{Name: debianStageName("bookworm", aptPip), Debian: aptPip, Suite: "bookworm"},
			{Name: "mytpl", Requirements: []string{"six"}, Base: debianStageName("bookworm", aptPip)},
		},
		"python-copy-run": {
			{Name: twin, Debian: []string{"python3"}},
			{Name: "mytpl", Dockerfile: "FROM " + twin + "\n" +
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
		// addMcpServer installs nothing: its servers run outside.
		"mcp-servers": {
			{Name: debianStageName("", e2bTwin), Debian: e2bTwin},
			{Name: "mytpl", Dockerfile: "FROM " + debianStageName("", e2bTwin) + "\n"},
		},
		"base-env": {
			{Name: debianStageName("", e2bTwin), Debian: e2bTwin},
			{Name: "mytpl", Dockerfile: "FROM " + debianStageName("", e2bTwin) + "\n", ReadyCmd: "true", Vars: map[string]string{"C": "3"}},
		},
		"base-apt": {
			{Name: debianStageName("", mastra), Debian: mastra},
			{Name: "mytpl", Dockerfile: "FROM " + debianStageName("", mastra) + "\n"},
		},
		"code-interpreter-apt": {
			{Name: debianStageName("", interp), Debian: interp},
			{Name: "mytpl", Dockerfile: "FROM " + debianStageName("", interp) + "\n"},
		},
	} {
		stages, err := Plan(readTemplate(t, name), "mytpl", pre, exists)
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
		if len(stages) == 2 && stages[0].Shared != strings.HasPrefix(stages[0].Build.Name, "e2b-debian.") {
			t.Errorf("%s: stage 1 shared %v, named %s", name, stages[0].Shared, stages[0].Build.Name)
		}
	}
	// The copy's stage names its upload, which the build context holds.
	stages, _ := Plan(readTemplate(t, "python-copy-run"), "mytpl", pre, exists)
	if got := stages[1].Copies; len(got) != 1 || got[0] != copyHash {
		t.Errorf("copies %v, want [%s]", got, copyHash)
	}
	// skipCache (the spec's force) builds a Debian root of the template's own.
	forced := readTemplate(t, "apt-pip")
	forced.Force = true
	stages, _ = Plan(forced, "mytpl", pre, exists)
	if len(stages) != 2 || stages[0].Shared || stages[0].Build.Name != pre+".1" || stages[1].Build.Base != pre+".1" {
		t.Errorf("skipCache: %+v", stages)
	}
	// A shared root's name is one of a stage's: no template, never listed.
	if !service.IsBuildStage(twin) || !envstore.NamePattern.MatchString(twin) || twin == debianStageName("trixie", []string{"python3"}) {
		t.Errorf("shared stage name %s", twin)
	}
}

// A template over an environment that has a packages layer: its root is
// the layer's base, its requirements come first in the template's own
// layer (layers do not stack), its metadata carries on; a Dockerfile step
// goes on that root, the layer after it.
func TestTemplatePlanOverLayer(t *testing.T) {
	const pre = "t2.b01234567"
	layered := envstore.Env{Name: "tpl1", LayerDir: "/l", Source: envstore.Source{Kind: "requirements", Packages: []string{"probe==1.0"}},
		Vars: map[string]string{"A": "1"}, Workdir: "/w", StartCmd: "s", ReadyCmd: "r"}
	over := envstore.Env{Name: "tpl2", LayerDir: "/l2", Base: "deb", RootDir: "/d", Source: envstore.Source{Kind: "requirements", Packages: []string{"q"}}}
	exists := lookupOf(layered, over, envstore.Env{Name: "deb", RootDir: "/d"})
	twin := debianStageName("", []string{"python3", "python3-pip"})
	for _, c := range []struct {
		name string
		spec Spec
		want []service.EnvironmentBuild
	}{
		{"pip", Spec{FromTemplate: "tpl1", Steps: []Step{{Type: "RUN", Args: []string{"pip install y probe==1.0"}}}},
			[]service.EnvironmentBuild{{Name: "t2", Requirements: []string{"probe==1.0", "y"}, Workdir: "/w", StartCmd: "s", ReadyCmd: "r", Vars: map[string]string{"A": "1"}}}},
		{"metadata", Spec{FromImage: "tpl1", StartCmd: "s2", Steps: []Step{{Type: "ENV", Args: []string{"C", "3"}}}},
			[]service.EnvironmentBuild{{Name: "t2", Requirements: []string{"probe==1.0"}, Workdir: "/w", StartCmd: "s2", ReadyCmd: "r", Vars: map[string]string{"A": "1", "C": "3"}}}},
		{"run", Spec{FromTemplate: "tpl1", Steps: []Step{{Type: "RUN", Args: []string{"true"}}}},
			[]service.EnvironmentBuild{
				{Name: twin, Debian: []string{"python3", "python3-pip"}},
				{Name: pre + ".2", Dockerfile: "FROM " + twin + "\n" + `ENV A="1"` + "\n" + `WORKDIR "/w"` + "\n" + `RUN ["/bin/sh","-c","true"]` + "\n"},
				{Name: "t2", Requirements: []string{"probe==1.0"}, Base: pre + ".2", Workdir: "/w", StartCmd: "s", ReadyCmd: "r", Vars: map[string]string{"A": "1"}},
			}},
		{"layer over a root", Spec{FromTemplate: "tpl2"},
			[]service.EnvironmentBuild{{Name: "t2", Requirements: []string{"q"}, Base: "deb"}}},
		{"a root", Spec{FromTemplate: "deb", Steps: []Step{{Type: "ENV", Args: []string{"C", "3"}}}},
			[]service.EnvironmentBuild{{Name: "t2", Dockerfile: "FROM deb\n", Vars: map[string]string{"C": "3"}}}},
	} {
		stages, err := Plan(c.spec, "t2", pre, exists)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []service.EnvironmentBuild
		for _, st := range stages {
			got = append(got, st.Build)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// What codecage cannot build is refused with E2B's reason: the message
// names the step, and the step is the one the SDK points its BuildError
// at ("base", or the step's index from 1).
func TestTemplatePlanRefusals(t *testing.T) {
	for name, want := range map[string]struct{ step, says string }{
		"npm":           {"1", "npmInstall"},
		"apt-after-run": {"2", "aptInstall is supported only right after"},
		"no-template":   {"base", `template "nope" not found`},
		"registry":      {"base", "registry credentials"},
		"aws":           {"base", "fromAWSRegistry"},
		"apt-on-image":  {"1", "aptInstall is supported only right after"},
		"pip-project":   {"1", "the copied project"},
	} {
		_, err := Plan(readTemplate(t, name), "mytpl", "mytpl.b01234567", lookupOf())
		se, ok := err.(*stepError)
		if !ok || se.Step != want.step || !strings.Contains(se.Message, want.says) {
			t.Errorf("%s: %#v, want step %s saying %q", name, err, want.step, want.says)
		}
	}
	bad := map[string]Step{
		"env newline": {Type: "ENV", Args: []string{"A", "x\ny"}},
		"env name":    {Type: "ENV", Args: []string{"A=B", "x"}},
		"copy up":     {Type: "COPY", Args: []string{"../etc", "/x"}, FilesHash: strings.Repeat("a", 64)},
		"copy nohash": {Type: "COPY", Args: []string{"a", "/x"}},
		"run as B0b":  {Type: "RUN", Args: []string{"true", "B0b!"}},
		"set user $":  {Type: "USER", Args: []string{"$(id)"}},
		"unknown":     {Type: "HEALTHCHECK"},
		"long arg":    {Type: "RUN", Args: []string{strings.Repeat("x", maxStepArg+1)}},
		"apt version": {Type: "RUN", Args: []string{aptPrefix + "curl=7.0"}},
		"pip option":  {Type: "RUN", Args: []string{"pip install -r req.txt"}},
	}
	for name, st := range bad {
		_, err := Plan(Spec{FromImage: "debian:stable", Steps: []Step{st}}, "t", "t.b01234567", lookupOf())
		if se, ok := err.(*stepError); !ok || se.Step != "1" {
			t.Errorf("%s: %#v, want a refusal at step 1", name, err)
		}
	}
	odd := Spec{FromImage: "debian:stable", Steps: []Step{{Type: "RUN", Args: []string{"echo 'x'\n" + strings.Repeat("y", maxStepArg-10), "bob\x1b"}}}}
	_, err := Plan(odd, "t", "t.b01234567", lookupOf())
	if se, ok := err.(*stepError); !ok || len(se.Message) > 1024 || strings.ContainsAny(se.Message, "\n\x1b") || !strings.Contains(se.Message, `"bob\x1b"`) {
		t.Errorf("runCmd as an odd user: %#v, want a short refusal with the user escaped", err)
	}
	many := Spec{Steps: make([]Step, maxTemplateSteps+1)}
	if _, err := Plan(many, "t", "t.b01234567", lookupOf()); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("too many steps: %v", err)
	}
}

// setUser and runCmd's user become USER lines of the Dockerfile stages,
// each name checked against the root's accounts first (failing with
// E2B's words for an unknown user), the stage going back to the
// template's current user after a runCmd as another; E2B's "user" and
// root are the build's root; the next stage starts as the current user.
func TestTemplatePlanUsers(t *testing.T) {
	if _, err := Plan(readTemplate(t, "user-root"), "t", "t.b01234567", lookupOf()); err != nil {
		t.Fatalf("setUser('root'): %v", err)
	}
	run := func(cmd string, user ...string) Step {
		return Step{Type: "RUN", Args: append([]string{cmd}, user...)}
	}
	spec := Spec{FromImage: "debian:stable", Steps: []Step{
		run("echo a", "nobody"), run("echo b"), {Type: "USER", Args: []string{"postgres"}}, run("echo c"),
		run("echo d", "root"), run("echo e", "1001"), {Type: "USER", Args: []string{"user"}}, run("echo f"),
	}}
	stages, err := Plan(spec, "t", "t.b01234567", lookupOf())
	if err != nil {
		t.Fatal(err)
	}
	df := stages[len(stages)-1].Build.Dockerfile
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(df), "\n") {
		switch {
		case strings.HasPrefix(line, "USER "):
			got = append(got, line)
		case strings.HasPrefix(line, "RUN ") && strings.Contains(line, "/etc/passwd"):
			got = append(got, "check "+checkedUser.FindStringSubmatch(line)[1])
		case strings.HasPrefix(line, "RUN "):
			got = append(got, line[strings.LastIndex(line, "echo"):len(line)-2])
		}
	}
	want := []string{"check nobody", "USER nobody", "echo a", "USER root", "echo b", "check postgres", "USER postgres", "echo c",
		"USER root", "echo d", "USER postgres", "USER 1001", "echo e", "USER postgres", "USER root", "echo f"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the Dockerfile's users and commands:\n got %q\nwant %q\n%s", got, want, df)
	}
	// The check, run by sh as buildah would: an account of /etc/passwd
	// passes; another fails with E2B's words (the SDK's own test,
	// test_run_command_as_user_that_does_not_exist, looks for them).
	for user, want := range map[string]string{
		"root":          "",
		"nosuchuser123": "Error: failed to run command 'whoami': command failed: unauthenticated: invalid username: 'nosuchuser123'\n",
	} {
		argv := []string{"/bin/sh", "-c", mustCheckScript(t, user)}
		var stderr strings.Builder
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		if (want == "") != (err == nil) || stderr.String() != want {
			t.Errorf("the check of %s: %v, stderr %q, want %q", user, err, stderr.String(), want)
		}
	}
	// A stage opened after setUser starts as that user.
	spec = Spec{FromImage: "debian:stable", Steps: []Step{{Type: "USER", Args: []string{"nobody"}}, run("echo g")}}
	if stages, err = Plan(spec, "t", "t.b01234567", lookupOf()); err != nil {
		t.Fatal(err)
	}
	if df := stages[len(stages)-1].Build.Dockerfile; !strings.Contains(df, "USER nobody\nRUN [\"/bin/sh\",\"-c\",\"echo g\"]") {
		t.Errorf("a stage after setUser:\n%s", df)
	}
}

var checkedUser = regexp.MustCompile(`= '([^']+)' \]`)

// mustCheckScript is the shell script of the account check for user.
func mustCheckScript(t *testing.T, user string) string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.SplitN(userLines(user, "failed to run command 'whoami': command failed"), "\n", 2)[0], "RUN ")), &argv); err != nil || len(argv) != 3 {
		t.Fatalf("the check of %s: %v %q", user, err, argv)
	}
	return argv[2]
}

func TestGatewayServers(t *testing.T) {
	if got := GatewayServers(readTemplate(t, "mcp-servers")); fmt.Sprint(got) != "[canary github]" {
		t.Errorf("GatewayServers = %v", got)
	}
	if got := GatewayServers(readTemplate(t, "image-run")); len(got) != 0 {
		t.Errorf("a template without addMcpServer: %v", got)
	}
	// A command that only looks like it runs as any other.
	spec := Spec{FromTemplate: "base", Steps: []Step{{Type: "RUN", Args: []string{"mcp-gateway pull x; rm -rf /", "root"}}}}
	if got := GatewayServers(spec); len(got) != 0 {
		t.Errorf("%v", got)
	}
}
