package service_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/pipfixture"
	"github.com/codecage/codecage/internal/service"
)

// envRootPythonMarker is what the pip-bearing fixture root's Python
// writes to stderr when it runs pip: proof that pip ran on that Python,
// in a sandbox from that root, and not on the host's.
const envRootPythonMarker = "codecage-env-root-python"

// commitRoot commits to the store under stateDir an environment whose
// root make builds.
func commitRoot(t *testing.T, stateDir, name string, make func(root string) error) {
	t.Helper()
	commitEnvironment(t, stateDir, envstore.Env{Name: name}, make)
}

// commitEnvironment commits to the store under stateDir an environment
// whose root make builds (into a directory that does not exist yet), as
// an image's import leaves one, and returns its record. meta's Python is
// /usr/bin/python3 at the host's version (the fixtures copy the host's)
// unless it says otherwise.
func commitEnvironment(t *testing.T, stateDir string, meta envstore.Env, make func(root string) error) envstore.Env {
	t.Helper()
	store, err := envstore.Open(filepath.Join(stateDir, "environments"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Stage()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(st.Root()); err != nil {
		t.Fatal(err)
	}
	if err := make(st.Root()); err != nil {
		t.Fatal(err)
	}
	if meta.Python == "" {
		out, err := exec.Command("/usr/bin/python3", "-c", "import platform; print(platform.python_version())").Output()
		if err != nil {
			t.Fatal(err)
		}
		meta.Python, meta.PythonVersion = "/usr/bin/python3", strings.TrimSpace(string(out))
	}
	if meta.Source.Kind == "" {
		meta.Source.Kind = "image"
	}
	meta.Created = time.Now()
	env, err := store.Commit(st, meta)
	if err != nil {
		t.Fatal(err)
	}
	if env.RootDir == "" {
		t.Fatal("the committed environment has no root")
	}
	return env
}

// rootWithPip is envfixture.MinimalPythonRoot plus a copy (not hard
// links: sealing the root changes its files' modes) of the host's
// Debian pip, which vendors its dependencies, and a sitecustomize that
// marks a pip run of this Python.
func rootWithPip(root string) error {
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		return err
	}
	dist := filepath.Join(root, "usr/lib/python3/dist-packages")
	matches, _ := filepath.Glob("/usr/lib/python3/dist-packages/pip-*.dist-info")
	for _, src := range append([]string{"/usr/lib/python3/dist-packages/pip"}, matches...) {
		if out, err := exec.Command("cp", "-a", src, dist+"/").CombinedOutput(); err != nil {
			return &os.PathError{Op: "cp " + string(out), Path: src, Err: err}
		}
	}
	mark := "import sys\nif 'pip' in getattr(sys, 'orig_argv', []):\n    sys.stderr.write('" + envRootPythonMarker + "\\n')\n"
	return os.WriteFile(filepath.Join(dist, "sitecustomize.py"), []byte(mark), 0o644)
}

// envPipIndex serves envgreet (needs envcolor), envcolor and envextra.
func envPipIndex(t *testing.T) *pipfixture.Index {
	t.Helper()
	dir := t.TempDir()
	for _, w := range []struct {
		name string
		opts pipfixture.WheelOptions
	}{{"envgreet", pipfixture.WheelOptions{Requires: []string{"envcolor"}}}, {"envcolor", pipfixture.WheelOptions{}}, {"envextra", pipfixture.WheelOptions{}}} {
		if _, err := pipfixture.Wheel(dir, w.name, "1.0", w.opts); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := pipfixture.ServeIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	return idx
}

// pip_install in a session from an environment with a root of its own
// runs that root's Python's pip, in a sandbox from the root (the
// marker its sitecustomize writes is in pip's log), and the session
// imports what it installed; an environment whose Python has no pip is
// refused with a clear error, and nothing is installed.
func TestPipInstallInEnvironmentRoot(t *testing.T) {
	idx := envPipIndex(t)
	svc := envService(t, idx, func(c *config.Config) {
		commitRoot(t, c.StateDir, "nopip", envfixture.MinimalPythonRoot)
		commitRoot(t, c.StateDir, "withpip", rootWithPip)
	})
	ctx := context.Background()

	nopip, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "nopip"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, nopip.ID, "")
	res, err := svc.PipInstall(ctx, service.InstallRequest{Package: "envcolor", SessionID: nopip.ID})
	if err == nil || service.ErrorKind(err) != service.KindInvalidRequest || !strings.Contains(err.Error(), "no pip module") ||
		!strings.Contains(err.Error(), `"nopip"`) {
		t.Fatalf("pip_install in an environment without pip: %v (kind %s) %+v", err, service.ErrorKind(err), res)
	}
	if r := run(t, svc, "import envcolor", func(r *service.Request) { r.SessionID, r.AllowedImports = nopip.ID, nil }); r.Success {
		t.Fatal("envcolor imports in the session whose install was refused")
	}

	withpip, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "withpip"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, withpip.ID, "")
	start := time.Now()
	res, err = svc.PipInstall(ctx, service.InstallRequest{Package: "envgreet", SessionID: withpip.ID})
	if err != nil || !res.Success {
		t.Fatalf("pip_install in an environment with pip: %v %+v", err, res)
	}
	t.Logf("pip_install in the environment's root took %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(res.Log, envRootPythonMarker) {
		t.Fatalf("pip did not run on the environment's Python (no marker in its log):\n%s", res.Log)
	}
	var names []string
	for _, p := range res.Installed {
		names = append(names, p.Name)
	}
	if !slices.Contains(names, "envgreet") || !slices.Contains(names, "envcolor") {
		t.Fatalf("installed %v", names)
	}
	if got := mustSucceed(t, run(t, svc, "import envgreet, envcolor; print('imported')", func(r *service.Request) { r.SessionID, r.AllowedImports = withpip.ID, nil })); got != "imported\n" {
		t.Fatalf("the session after the install: %q", got)
	}
}

// Over the host's root (a requirements environment) pip_install keeps
// the host's pip, as before; the environment's layer is there for its
// start and ready commands (commands of a session see its layer), and
// the session imports both the layer's packages and the installed one.
func TestPipInstallInRequirementsEnvironment(t *testing.T) {
	idx := envPipIndex(t)
	svc := envService(t, idx, nil)
	ctx := context.Background()
	_, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "greet", Requirements: []string{"envgreet==1.0"},
		StartCmd: `python3 -c "import envgreet, time; open('layer-seen', 'w').write('yes'); time.sleep(600)"`,
		ReadyCmd: "cat layer-seen"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "greet"})
	if err != nil {
		t.Fatalf("a session whose start command imports the layer: %v", err)
	}
	defer svc.CloseSession(ctx, info.ID, "")
	res, err := svc.PipInstall(ctx, service.InstallRequest{Package: "envextra", SessionID: info.ID})
	if err != nil || !res.Success {
		t.Fatalf("pip_install over the host's root: %v %+v", err, res)
	}
	if strings.Contains(res.Log, envRootPythonMarker) {
		t.Fatal("the marker of the fixture root's Python in a host-root install")
	}
	if got := mustSucceed(t, run(t, svc, "import envgreet, envextra; print(open('layer-seen').read())", func(r *service.Request) { r.SessionID, r.AllowedImports = info.ID, nil })); got != "yes\n" {
		t.Fatalf("the session: %q", got)
	}
}
