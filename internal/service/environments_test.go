package service_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/pipfixture"
	"github.com/codecage/codecage/internal/service"
)

// envIndex serves a wheel index: envgreet 1.0 (needs envcolor), envcolor,
// envbroken (needs a project the index lacks), and a blocked dependency.
func envIndex(t *testing.T) *pipfixture.Index {
	t.Helper()
	dir := t.TempDir()
	must := func(_ string, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(pipfixture.Wheel(dir, "envgreet", "1.0", pipfixture.WheelOptions{Requires: []string{"envcolor"}}))
	must(pipfixture.Wheel(dir, "envcolor", "0.4", pipfixture.WheelOptions{}))
	must(pipfixture.Wheel(dir, "envbroken", "1.0", pipfixture.WheelOptions{Requires: []string{"nosuchdep"}}))
	must(pipfixture.Wheel(dir, "envbadparent", "1.0", pipfixture.WheelOptions{Requires: []string{"evilthing"}}))
	must(pipfixture.Wheel(dir, "evilthing", "1.0", pipfixture.WheelOptions{}))
	idx, err := pipfixture.ServeIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	return idx
}

func envService(t *testing.T, idx *pipfixture.Index, edit func(*config.Config)) *service.Service {
	return installService(t, func(c *config.Config) {
		c.PipIndexURL = idx.URL
		c.PoolSize = 0
		c.EnvDebianCache = envfixture.DebCache() // what Debian builds download, once per machine
		if edit != nil {
			edit(c)
		}
	})
}

// storeDirs lists what the environment store holds under each of its
// directories (the host's view: a failed build must leave nothing).
func storeDirs(t *testing.T, svc *service.Service) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, d := range []string{"roots", "layers", "envs", "staging"} {
		ents, _ := os.ReadDir(filepath.Join(svc.Config().StateDir, "environments", d))
		for _, e := range ents {
			out[d] = append(out[d], e.Name())
		}
	}
	return out
}

func TestEnvironmentFromRequirements(t *testing.T) {
	idx := envIndex(t)
	svc := envService(t, idx, nil)
	ctx := context.Background()
	var log bytes.Buffer
	e, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "greet-env", Requirements: []string{"envgreet==1.0  # the app", "", "# comment"},
		Preimport: []string{"envgreet"}, Log: &log})
	if err != nil {
		t.Fatalf("build: %v\nlog:\n%s", err, log.String())
	}
	if e.Name != "greet-env" || e.Source.Kind != "requirements" || e.RootDir != "" || e.LayerDir == "" || !strings.HasPrefix(e.ID, "sha256:") {
		t.Fatalf("record: %+v", e)
	}
	if !slices.Contains(e.Modules, "envgreet") || !slices.Contains(e.Modules, "envcolor") {
		t.Errorf("modules %v: want envgreet and its dependency envcolor", e.Modules)
	}
	if e.Python != "/usr/bin/python3" || !strings.HasPrefix(e.PythonVersion, "3.") || !slices.Equal(e.Preimport, []string{"envgreet"}) {
		t.Errorf("python %q %q preimport %v", e.Python, e.PythonVersion, e.Preimport)
	}
	if idx.Requests("/simple/envgreet/") == 0 {
		t.Error("pip never asked the index")
	}
	if !strings.Contains(log.String(), "Successfully installed") || !strings.Contains(log.String(), "built in") {
		t.Errorf("the log lacks pip's output or the end:\n%s", log.String())
	}
	// The layer, from the host: the package is there, root's, read-only
	// to everyone else.
	if _, err := os.Stat(filepath.Join(e.LayerDir, "envgreet")); err != nil {
		t.Errorf("layer: %v", err)
	}
	_ = filepath.Walk(e.LayerDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&0o022 != 0 {
			t.Errorf("%s: mode %v is writable by group or others", p, fi.Mode())
		}
		return nil
	})
	got, err := svc.Environment(ctx, "greet-env")
	if err != nil || got.ID != e.ID || !slices.Equal(got.Modules, e.Modules) {
		t.Errorf("get: %v %+v", err, got)
	}
	all, err := svc.Environments(ctx)
	if err != nil || len(all) != 1 || all[0].Name != "greet-env" {
		t.Errorf("list: %v %+v", err, all)
	}
	// The name is taken now.
	if _, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "greet-env", Requirements: []string{"envcolor"}}); service.ErrorKind(err) != service.KindEnvironmentExists {
		t.Errorf("a second build of the name: %v", err)
	}
	// A layer over another environment's root: that one has a layer, and
	// layers do not stack.
	if _, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "over", Base: "greet-env", Requirements: []string{"envcolor"}}); service.ErrorKind(err) != service.KindInvalidRequest || !strings.Contains(err.Error(), "do not stack") {
		t.Errorf("a layer over a layer: %v", err)
	}
	if _, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "over", Base: "nosuch", Requirements: []string{"envcolor"}}); service.ErrorKind(err) != service.KindEnvironmentNotFound {
		t.Errorf("a missing base: %v", err)
	}
}

// A failed build says why and leaves nothing in the store: a requirement
// the index lacks, a dependency it lacks (pip fails), a blocked
// dependency, a pre-import that does not import.
func TestEnvironmentBuildFailureLeavesNothing(t *testing.T) {
	idx := envIndex(t)
	svc := envService(t, idx, func(c *config.Config) { c.BlockedPackages = append(c.BlockedPackages, "evilthing") })
	ctx := context.Background()
	for _, c := range []struct {
		b        service.EnvironmentBuild
		kind     string
		contains string
	}{
		{service.EnvironmentBuild{Requirements: []string{"absentpkg"}}, service.KindBuildFailed, `absentpkg`},
		{service.EnvironmentBuild{Requirements: []string{"envbroken"}}, service.KindBuildFailed, `"nosuchdep"`},
		{service.EnvironmentBuild{Requirements: []string{"envbadparent"}}, service.KindBuildFailed, "evilthing, which is blocked"},
		{service.EnvironmentBuild{Requirements: []string{"evilthing"}}, service.KindInvalidRequest, "blocked"},
		{service.EnvironmentBuild{Requirements: []string{"envcolor"}, Preimport: []string{"envcolor", "notthere"}}, service.KindBuildFailed, "notthere (ModuleNotFoundError"},
	} {
		c.b.Name = "failing"
		var log bytes.Buffer
		c.b.Log = &log
		_, err := svc.BuildEnvironment(ctx, c.b)
		if service.ErrorKind(err) != c.kind || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%v: got %v (%s), want %s saying %q\nlog:\n%s", c.b.Requirements, err, service.ErrorKind(err), c.kind, c.contains, log.String())
		}
		if left := storeDirs(t, svc); len(left) > 0 {
			t.Errorf("%v: left behind %v", c.b.Requirements, left)
		}
		if _, err := svc.Environment(ctx, "failing"); !errors.Is(err, envstore.ErrNotFound) {
			t.Errorf("%v: recorded anyway: %v", c.b.Requirements, err)
		}
	}
}

func TestEnvironmentRequestValidation(t *testing.T) {
	svc := envService(t, envIndex(t), nil)
	ctx := context.Background()
	long := strings.Repeat("a", 65)
	for _, b := range []service.EnvironmentBuild{
		{Name: "", Requirements: []string{"envcolor"}},
		{Name: "Upper", Requirements: []string{"envcolor"}},
		{Name: "-dash", Requirements: []string{"envcolor"}},
		{Name: "a/b", Requirements: []string{"envcolor"}},
		{Name: "../x", Requirements: []string{"envcolor"}},
		{Name: long, Requirements: []string{"envcolor"}},
		{Name: "ok"}, // no source
		{Name: "ok", Requirements: []string{"envcolor"}, Debian: []string{"python3"}},         // two
		{Name: "ok", Requirements: []string{"--index-url http://evil/"}},                      // an option
		{Name: "ok", Requirements: []string{"git+https://x/y"}},                               // a URL
		{Name: "ok", Requirements: []string{"envcolor ; python_version>'3'"}},                 // a marker
		{Name: "ok", Requirements: []string{"./local"}},                                       // a path
		{Name: "ok", Debian: []string{"Bad_Name"}},                                            // not a Debian name
		{Name: "ok", Debian: []string{"python3; rm -rf /"}},                                   // nor this
		{Name: "ok", Requirements: []string{"envcolor"}, Preimport: []string{"os; import x"}}, // not a module
		{Name: "ok", Requirements: []string{"envcolor"}, Workdir: "relative"},                 // not absolute
		{Name: "ok", Requirements: []string{"envcolor"}, Vars: map[string]string{"A=B": "c"}}, // not a name
		{Name: "ok", Requirements: []string{"envcolor"}, StartCmd: "x\x00y"},                  // NUL
		{Name: "ok", Requirements: []string{"envcolor"}, StartCmd: strings.Repeat("x", 5000)}, // too long
		{Name: "ok", Requirements: slices.Repeat([]string{"envcolor"}, 501)},                  // too many
		{Name: "ok", Image: "/x.tar", Base: "other"},                                          // base with an image
		{Name: "ok", Requirements: []string{"envcolor"}, Base: "Bad"},                         // a bad base
	} {
		_, err := svc.BuildEnvironment(ctx, b)
		if service.ErrorKind(err) != service.KindInvalidRequest {
			t.Errorf("%q %v: %v, want invalid_request", b.Name, b.Requirements, err)
		}
	}
	if left := storeDirs(t, svc); len(left) > 0 {
		t.Errorf("left behind %v", left)
	}
	for _, name := range []string{"", "Bad", long} {
		if _, err := svc.Environment(ctx, name); service.ErrorKind(err) != service.KindInvalidRequest {
			t.Errorf("get %q: %v", name, err)
		}
	}
	if err := svc.RemoveEnvironment(ctx, "absent"); service.ErrorKind(err) != service.KindEnvironmentNotFound {
		t.Errorf("rm absent: %v", err)
	}
}

// Two builds of one name at once: one builds it, the other is refused at
// once as existing; a third name waits for no one (SANDBOX_ENV_MAX_BUILDS
// 2) while the bound holds at two.
func TestEnvironmentConcurrentBuildsOfOneName(t *testing.T) {
	svc := envService(t, envIndex(t), func(c *config.Config) { c.EnvMaxBuilds = 2 })
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	envs := make([]envstore.Env, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			envs[i], errs[i] = svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "twin", Requirements: []string{"envcolor"}})
		}()
	}
	wg.Wait()
	ok, exists := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
			if envs[i].Name != "twin" {
				t.Errorf("record %+v", envs[i])
			}
		case service.ErrorKind(err) == service.KindEnvironmentExists:
			exists++
		default:
			t.Errorf("build %d: %v", i, err)
		}
	}
	if ok != 1 || exists != 1 {
		t.Fatalf("%d built, %d refused as existing: %v", ok, exists, errs)
	}
	all, _ := svc.Environments(ctx)
	if len(all) != 1 {
		t.Errorf("records: %+v", all)
	}
	if left := storeDirs(t, svc)["staging"]; len(left) > 0 {
		t.Errorf("staging left: %v", left)
	}
}

// rm takes the name at once; gc frees the layer no record uses, and keeps
// one another record shares.
func TestEnvironmentRemoveAndCollect(t *testing.T) {
	svc := envService(t, envIndex(t), nil)
	ctx := context.Background()
	a, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "one", Requirements: []string{"envcolor"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "two", Requirements: []string{"envgreet"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.LayerDir == b.LayerDir {
		t.Fatalf("two different layers share %s", a.LayerDir)
	}
	if err := svc.RemoveEnvironment(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Environment(ctx, "one"); service.ErrorKind(err) != service.KindEnvironmentNotFound {
		t.Errorf("after rm: %v", err)
	}
	if _, err := os.Stat(a.LayerDir); err != nil {
		t.Errorf("rm freed the layer before gc: %v", err)
	}
	r, err := svc.CollectEnvironments(ctx)
	if err != nil || r.Layers != 1 || r.Bytes <= 0 || len(r.Deferred) != 0 {
		t.Fatalf("gc: %v %+v", err, r)
	}
	if _, err := os.Stat(a.LayerDir); !os.IsNotExist(err) {
		t.Errorf("gc kept the removed environment's layer: %v", err)
	}
	if _, err := os.Stat(b.LayerDir); err != nil {
		t.Errorf("gc took a recorded environment's layer: %v", err)
	}
	if r, err := svc.CollectEnvironments(ctx); err != nil || r.Layers != 0 {
		t.Errorf("a second gc: %v %+v", err, r)
	}
}

// Environments are the operator's: a key named in SANDBOX_OPERATOR_KEYS,
// an in-process caller, a loopback caller of a server without keys; not
// another key, nor a remote caller of a server without keys.
func TestEnvironmentOperatorsOnly(t *testing.T) {
	svc := envService(t, envIndex(t), func(c *config.Config) { c.OperatorKeys = []string{"alice"} })
	base := context.Background()
	as := func(c service.Caller) context.Context { return service.WithCaller(base, c) }
	for _, c := range []struct {
		ctx context.Context
		ok  bool
	}{
		{base, true},
		{as(service.Caller{Key: "alice", Surface: service.SurfaceREST, RemoteAddr: "10.0.0.9:5000"}), true},
		{as(service.Caller{Key: "bob", Surface: service.SurfaceREST, RemoteAddr: "127.0.0.1:5000"}), false},
		{as(service.Caller{Surface: service.SurfaceREST, RemoteAddr: "127.0.0.1:5000"}), true},
		{as(service.Caller{Surface: service.SurfaceREST, RemoteAddr: "[::1]:5000"}), true},
		{as(service.Caller{Surface: service.SurfaceREST, RemoteAddr: "10.0.0.9:5000"}), false},
		{as(service.Caller{Surface: service.SurfaceMCPStdio}), true},
	} {
		c0, _ := service.CallerFrom(c.ctx)
		_, err := svc.Environments(c.ctx)
		if got := err == nil; got != c.ok {
			t.Errorf("%+v: list: %v", c0, err)
		}
		if !c.ok {
			if service.ErrorKind(err) != service.KindForbidden {
				t.Errorf("%+v: %v, want forbidden", c0, err)
			}
			_, err := svc.BuildEnvironment(c.ctx, service.EnvironmentBuild{Name: "x", Requirements: []string{"envcolor"}})
			if service.ErrorKind(err) != service.KindForbidden {
				t.Errorf("%+v: build: %v", c0, err)
			}
			if err := svc.RemoveEnvironment(c.ctx, "x"); service.ErrorKind(err) != service.KindForbidden {
				t.Errorf("%+v: rm: %v", c0, err)
			}
			if _, err := svc.CollectEnvironments(c.ctx); service.ErrorKind(err) != service.KindForbidden {
				t.Errorf("%+v: gc: %v", c0, err)
			}
		}
	}
	// Whether a name exists is every caller's question (a run may name
	// it); the record stays the operators'.
	if _, err := svc.BuildEnvironment(base, service.EnvironmentBuild{Name: "known", Requirements: []string{"envcolor"}}); err != nil {
		t.Fatal(err)
	}
	bob := as(service.Caller{Key: "bob", Surface: service.SurfaceE2B, RemoteAddr: "10.0.0.9:5000"})
	if !svc.EnvironmentExists(bob, "known") || svc.EnvironmentExists(bob, "unknown") || svc.EnvironmentExists(bob, "../known") {
		t.Error("EnvironmentExists: want known only")
	}
	if _, err := svc.Environment(bob, "known"); service.ErrorKind(err) != service.KindForbidden {
		t.Errorf("bob reads the record: %v", err)
	}
}
