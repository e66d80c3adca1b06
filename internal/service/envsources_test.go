package service_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// TestEnvironmentFromEverySource builds an environment from each source
// the issue names (Debian packages with mmdebstrap, a requirements layer
// over that root from a local index, an image tarball, a Dockerfile with
// buildah FROM the Debian one) and, in a session from each, imports what
// that source added, from the interpreter and from a command; the host
// has none of those modules. The Debian build reaches deb.debian.org
// through its confined proxy (about a minute).
func TestEnvironmentFromEverySource(t *testing.T) {
	idx := envIndex(t)
	svc := envService(t, idx, func(c *config.Config) {
		c.AllowedImports = []string{policy.AllImports}
		c.EnvPoolSize = 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	build := func(b service.EnvironmentBuild) envstore.Env {
		t.Helper()
		var log bytes.Buffer
		b.Log = &log
		start := time.Now()
		e, err := svc.BuildEnvironment(ctx, b)
		if err != nil {
			t.Fatalf("build %s: %v\nlog:\n%s", b.Name, err, log.String())
		}
		t.Logf("%s: built in %s: python %s at %s, root %q, layer %q, %d bytes, modules %q", b.Name, time.Since(start).Round(time.Millisecond),
			e.PythonVersion, e.Python, e.RootDir, e.LayerDir, e.Size, e.Modules)
		return e
	}
	// Each environment records the modules its source added, and a run
	// under an import policy (the request's own list: the server's is
	// off) may import them in it, and not outside it.
	records := func(e envstore.Env, modules ...string) {
		t.Helper()
		for _, m := range modules {
			if !slices.Contains(e.Modules, m) {
				t.Fatalf("%s records the modules %q, without %s", e.Name, e.Modules, m)
			}
		}
		code := "import " + strings.Join(modules, ", ") + "\nprint('ok')"
		res, err := svc.Execute(ctx, service.Request{Owner: "o", Environment: e.Name, AllowedImports: []string{"sys"}, Code: code})
		if err != nil {
			t.Fatal(err)
		}
		if got := mustSucceed(t, res); got != "ok\n" {
			t.Fatalf("%s: a run under a policy importing its modules printed %q", e.Name, got)
		}
		res, err = svc.Execute(ctx, service.Request{Owner: "o", AllowedImports: []string{"sys"}, Code: code})
		if err != nil {
			t.Fatal(err)
		}
		if res.Success || res.Error == nil || !strings.Contains(res.Error.Message, "is not allowed") {
			t.Fatalf("%s's modules outside it: %+v", e.Name, res)
		}
	}
	// Each session imports its source's module in the interpreter and in
	// a python3 command, and sees the environment's variables.
	check := func(env, module, want string) {
		t.Helper()
		info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Environment: env})
		if err != nil {
			t.Fatalf("session in %s: %v", env, err)
		}
		defer svc.CloseSession(ctx, info.ID, "o")
		res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Code: "import " + module + "\nprint(" + want + ")"})
		if err != nil {
			t.Fatal(err)
		}
		if got := mustSucceed(t, res); !strings.Contains(got, "ok") {
			t.Fatalf("%s: the interpreter printed %q", env, got)
		}
		cmd, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Owner: "o", Command: "python3 -c 'import " + module + "; print(" + want + ")'"})
		if err != nil {
			t.Fatal(err)
		}
		if cmd.ExitCode != 0 || !strings.Contains(cmd.Stdout, "ok") {
			t.Fatalf("%s: a python3 command: exit %d stdout %q stderr %q", env, cmd.ExitCode, cmd.Stdout, cmd.Stderr)
		}
	}
	for _, m := range []string{"termcolor", "envgreet", "imgmod", "dockmod"} {
		res, err := svc.Execute(ctx, service.Request{Code: "import importlib.util as u\nprint(u.find_spec('" + m + "') is None)"})
		if err != nil || mustSucceed(t, res) != "True\n" {
			t.Fatalf("the host's root has %s: %v %+v", m, err, res)
		}
	}

	deb := build(service.EnvironmentBuild{Name: "deb", Debian: []string{"python3-termcolor", "python3-pip"}})
	check("deb", "termcolor", `"ok", termcolor.colored("x", "red")[:2]`)
	records(deb, "termcolor", "pip")

	debReq := build(service.EnvironmentBuild{Name: "deb-req", Base: "deb", Requirements: []string{"envgreet"}, Preimport: []string{"envgreet"}})
	check("deb-req", "envgreet, termcolor", `"ok", envgreet.VALUE`)
	records(debReq, "envgreet", "envcolor", "termcolor")

	work := t.TempDir()
	root := filepath.Join(work, "root")
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		t.Fatal(err)
	}
	stdlib, _ := filepath.Glob(filepath.Join(root, "usr/lib/python3.*"))
	if len(stdlib) != 1 {
		t.Fatalf("the fixture's standard library: %v", stdlib)
	}
	if err := os.WriteFile(filepath.Join(stdlib[0], "imgmod.py"), []byte("WHERE = 'image'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(work, "image.tar")
	if err := envfixture.DirArchive(root, archive); err != nil {
		t.Fatal(err)
	}
	build(service.EnvironmentBuild{Name: "img", Image: archive})
	check("img", "imgmod", `"ok", imgmod.WHERE`)

	bctx := filepath.Join(work, "context")
	if err := os.MkdirAll(bctx, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bctx, "dockmod.py"), []byte("import os\nWHERE = os.environ.get('DOCK', 'unset')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dock := build(service.EnvironmentBuild{Name: "dock", ContextDir: bctx, Dockerfile: "FROM deb\n" +
		"COPY dockmod.py /usr/lib/python3/dist-packages/dockmod.py\n" +
		"RUN python3 -c 'import dockmod' && echo built > /etc/dock-built\n" +
		"ENV DOCK=from-dockerfile\n"})
	check("dock", "dockmod, termcolor", `"ok", dockmod.WHERE`)
	records(dock, "dockmod", "termcolor")
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Environment: "dock"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, info.ID, "o")
	res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Code: "import os\nprint(os.environ.get('DOCK'))"})
	if err != nil || mustSucceed(t, res) != "from-dockerfile\n" {
		t.Fatalf("the Dockerfile's ENV in a session: %v %+v", err, res)
	}
}
