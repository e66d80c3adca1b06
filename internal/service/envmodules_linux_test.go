package service_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/service"
)

// An environment built from an image records the top-level modules its
// root's package directories add (a package, a module, a namespace
// package, an extension-less module of /usr/local; not metadata, caches,
// names that cannot be imported, nor a copy of a standard module), and
// under the operator's default import policy (basic) runs and sessions in
// it import them, while the same import outside it, and of a module it
// does not have, is still refused by the policy.
func TestEnvironmentRootModulesImport(t *testing.T) {
	cfg, root, pack := imageRoot(t)
	stdlib, _ := filepath.Glob(filepath.Join(root, "usr/lib/python3.*"))
	if len(stdlib) != 1 {
		t.Fatalf("the fixture's standard library: %v", stdlib)
	}
	v := filepath.Base(stdlib[0])
	files := map[string]string{
		"usr/lib/python3/dist-packages/imgtab/__init__.py":                    "X = 'tab'\n",
		"usr/lib/python3/dist-packages/imgsingle.py":                          "Y = 'single'\n",
		"usr/lib/python3/dist-packages/imgns/sub.py":                          "Z = 'ns'\n",
		"usr/lib/python3/dist-packages/imgtab-1.0.dist-info/METADATA":         "Name: imgtab\nVersion: 1.0\n",
		"usr/lib/python3/dist-packages/__pycache__/imgsingle.cpython-311.pyc": "",
		"usr/lib/python3/dist-packages/not-a-name.py":                         "",
		"usr/lib/python3/dist-packages/json.py":                               "raise ImportError('the image shadows json')\n",
		"usr/local/lib/" + v + "/dist-packages/imglocal.py":                   "W = 'local'\n",
		"usr/lib/python3/dist-packages/README.txt":                            "not a module\n",
	}
	for p, body := range files {
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	archive := pack()
	svc := newServiceWith(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	built, err := svc.BuildEnvironment(ctx, service.EnvironmentBuild{Name: "img", Image: archive})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"imglocal", "imgns", "imgsingle", "imgtab"}
	if !slices.Equal(built.Modules, want) {
		t.Fatalf("the environment's modules: %q, want %q", built.Modules, want)
	}
	// What codecage env show prints: the record, read back.
	shown, err := svc.Environment(ctx, "img")
	if err != nil || !slices.Equal(shown.Modules, want) {
		t.Fatalf("env show's modules: %q %v", shown.Modules, err)
	}

	code := "import imgtab, imgsingle, imgns.sub, imglocal\nprint(imgtab.X, imgsingle.Y, imgns.sub.Z, imglocal.W)"
	res, err := svc.Execute(ctx, service.Request{Code: code, Environment: "img", Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustSucceed(t, res); got != "tab single ns local\n" {
		t.Fatalf("a run in the environment printed %q", got)
	}
	info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "img"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, info.ID, "")
	res, err = svc.Execute(ctx, service.Request{SessionID: info.ID, Code: code})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustSucceed(t, res); got != "tab single ns local\n" {
		t.Fatalf("a session in the environment printed %q", got)
	}

	refused := func(what string, req service.Request) {
		t.Helper()
		res, err := svc.Execute(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Success || res.Error == nil || !strings.Contains(res.Error.Message, "is not allowed in profile basic") {
			t.Fatalf("%s: want the import policy's refusal, got %+v", what, res)
		}
	}
	refused("imgtab outside the environment", service.Request{Code: "import imgtab", Timeout: 30 * time.Second})
	refused("a module the environment lacks", service.Request{Code: "import imgnothere", Environment: "img", Timeout: 30 * time.Second})
	res, err = svc.Execute(ctx, service.Request{SessionID: info.ID, Code: "import imgnothere"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.Error == nil || !strings.Contains(res.Error.Message, "is not allowed in profile basic") {
		t.Fatalf("a module the environment lacks, in its session: %+v", res)
	}
}

// imageRoot is a service configuration without pools and a minimal
// Python root for a test to shape; pack makes the image tarball of the
// root as it then is.
func imageRoot(t *testing.T) (cfg config.Config, root string, pack func() string) {
	t.Helper()
	cfg = service.LeanTestConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.EnvPoolSize = 0, 0
	work := t.TempDir()
	root = filepath.Join(work, "root")
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		t.Fatal(err)
	}
	return cfg, root, func() string {
		t.Helper()
		archive := filepath.Join(work, "image.tar")
		if err := envfixture.DirArchive(root, archive); err != nil {
			t.Fatal(err)
		}
		return archive
	}
}
