package service_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// CODECAGE_TEST_ENVIRONMENT=image runs the suite (scripts/test.sh runs
// the containment tests so) with every run and session started from an
// environment whose root is not the host's: a Python image, packed as an
// image tarball here and imported by the service as an operator would.
// Every binary the sandboxes see is then the image's copy, and the walls
// must hold all the same.
const testEnvironmentVar = "CODECAGE_TEST_ENVIRONMENT"

// testEnvironmentName is the environment the suite's services default to.
const testEnvironmentName = "containment-image"

var testEnvironment struct {
	once sync.Once
	work string // the temporary directory holding it all
	dir  string // the environments' store
	err  error
}

// removeTestEnvironment deletes the suite's environment, if one was built
// (TestMain, after the tests: hundreds of MB in /tmp otherwise).
func removeTestEnvironment() {
	if testEnvironment.work != "" {
		os.RemoveAll(testEnvironment.work)
	}
}

// applyTestEnvironment makes cfg's runs and sessions start from the suite's
// environment when CODECAGE_TEST_ENVIRONMENT asks for it.
func applyTestEnvironment(tb testing.TB, cfg *config.Config) {
	tb.Helper()
	switch v := os.Getenv(testEnvironmentVar); v {
	case "":
		return
	case "image":
	default:
		tb.Fatalf("%s=%q: the suite knows image", testEnvironmentVar, v)
	}
	testEnvironment.once.Do(func() { testEnvironment.dir, testEnvironment.err = buildTestEnvironment() })
	if testEnvironment.err != nil {
		tb.Fatalf("the suite's environment: %v", testEnvironment.err)
	}
	cfg.EnvironmentsDir, cfg.DefaultEnvironment = testEnvironment.dir, testEnvironmentName
}

// buildTestEnvironment packs a Python root with the commands' programs
// into an image tarball and builds the environment from it, once per
// test binary, in a store of its own (TestMain removes it).
func buildTestEnvironment() (string, error) {
	work, err := os.MkdirTemp("", "codecage-envmode-")
	if err != nil {
		return "", err
	}
	testEnvironment.work = work
	root := filepath.Join(work, "root")
	// The commands' programs, the kernels' node and bash, and the set-user-ID
	// programs row 33 runs (the store strips their bits; the mount is
	// nosuid besides).
	more := []string{"bash", "node", "sleep", "kill", "ps", "su", "mount", "passwd", "chfn", "/usr/lib/polkit-1/polkit-agent-helper-1"}
	more = append(append(more, policy.DefaultCommands...), policy.E2BShellCommands...)
	if err := envfixture.PythonRootWith(root, more); err != nil {
		return "", err
	}
	// A file of Debian's setuptools that row 11 opens for writing, and
	// the module it loads.
	for _, p := range []string{"/usr/lib/python3/dist-packages/distutils-precedence.pth",
		"/usr/lib/python3/dist-packages/_distutils_hack/__init__.py", "/usr/lib/python3/dist-packages/_distutils_hack/override.py"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(root, p), b, 0o644); err != nil {
			return "", err
		}
	}
	archive := filepath.Join(work, "image.tar")
	if err := envfixture.DirArchive(root, archive); err != nil {
		return "", err
	}
	cfg := service.LeanTestConfig()
	cfg.StateDir = filepath.Join(work, "state")
	cfg.EnvironmentsDir = filepath.Join(work, "environments")
	svc, err := service.New(cfg, nil)
	if err != nil {
		return "", err
	}
	defer svc.Close()
	if _, err := svc.BuildEnvironment(context.Background(), service.EnvironmentBuild{Name: testEnvironmentName, Image: archive}); err != nil {
		return "", err
	}
	return cfg.EnvironmentsDir, os.RemoveAll(root)
}

// TestContainmentSuiteEnvironment: in the suite's environment mode, runs
// and sessions that name no environment do start from the image (its
// marker is there, the host's numpy and perl are not); in the plain mode,
// from the host's root.
func TestContainmentSuiteEnvironment(t *testing.T) {
	svc := newService(t)
	code := "import os\nprint(os.path.exists('/etc/os-release') and 'ID=codecage-fixture' in open('/etc/os-release').read(), os.path.exists('/usr/lib/python3/dist-packages/numpy'), os.path.exists('/usr/bin/perl'))"
	res, err := svc.Execute(context.Background(), service.Request{Code: code})
	if err != nil {
		t.Fatal(err)
	}
	want := "False True True\n"
	if os.Getenv(testEnvironmentVar) != "" {
		want = "True False False\n"
	}
	if res.Stdout != want {
		t.Fatalf("the run saw %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
	info, err := svc.CreateSession(context.Background(), service.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(context.Background(), info.ID, "")
	if wantEnv := map[bool]string{true: testEnvironmentName, false: ""}[os.Getenv(testEnvironmentVar) != ""]; info.Environment != wantEnv {
		t.Fatalf("the session's environment is %q, want %q", info.Environment, wantEnv)
	}
}
