package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// A session and a run from an environment whose root is a minimal Python
// root (envfixture.MinimalPythonRoot: the host's python3 and standard
// library, no dist-packages) import only what that root has: the standard
// library, not the host's numpy; the root's marker file is there; a
// run in it is served by the environment's own pool; the host's runs
// still see the host's numpy.
func TestSessionFromEnvironmentRoot(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.StateDir = t.TempDir()
	commitEnvironment(t, cfg.StateDir, envstore.Env{Name: "minimal", Preimport: []string{"json"}}, envfixture.MinimalPythonRoot)
	svc := newServiceWith(t, cfg)
	ctx := context.Background()

	// The root's os-release, no host perl, no host numpy, its own json.
	probe := "import os, importlib.util as u\n" +
		"print('codecage-fixture' in open('/etc/os-release').read(), not os.path.exists('/usr/bin/perl'), u.find_spec('numpy') is None, u.find_spec('json') is not None)"
	res, err := svc.Execute(ctx, service.Request{Code: probe, AllowedImports: []string{"*"}, Environment: "minimal", Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustSucceed(t, res); got != "True True True True\n" {
		t.Fatalf("a run in the minimal root: marker, no numpy, json: %q", got)
	}
	info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "minimal", AllowedImports: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, info.ID, "")
	if info.Environment != "minimal" {
		t.Fatalf("session info says environment %q", info.Environment)
	}
	res, err = svc.Execute(ctx, service.Request{Code: "import numpy", SessionID: info.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.Error == nil || !strings.Contains(res.Error.Type, "ModuleNotFoundError") {
		t.Fatalf("numpy imported in the minimal root: %+v", res)
	}
	res, err = svc.Execute(ctx, service.Request{Code: probe, SessionID: info.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustSucceed(t, res); got != "True True True True\n" {
		t.Fatalf("the session in the minimal root: %q", got)
	}
	// The session's commands and its file view see the root's /usr/bin.
	cmd, err := svc.RunCommand(ctx, service.CommandRequest{Command: "ls /usr/bin", SessionID: info.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !cmd.Success || strings.Contains(cmd.Stdout, "perl") || !strings.Contains(cmd.Stdout, "python3") {
		t.Fatalf("a command in the session: %+v", cmd)
	}
	list, err := svc.ListFiles(ctx, info.ID, "", "/usr/bin")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list.Files {
		names = append(names, f.Path)
	}
	if joined := strings.Join(names, " "); strings.Contains(joined, "perl") || !strings.Contains(joined, "python3") {
		t.Fatalf("the file view's /usr/bin is not the root's: %s", joined)
	}
	// The host's runs are as before: numpy is there.
	if got := mustSucceed(t, run(t, svc, "import importlib.util as u; print(u.find_spec('numpy') is not None)")); got != "True\n" {
		t.Fatalf("the host's root lost numpy: %q", got)
	}
	pooled := false
	for name := range svc.PoolStats() {
		pooled = pooled || strings.Contains(name, "@env:")
	}
	if !pooled {
		t.Fatalf("no pool made for the environment: %v", svc.PoolStats())
	}
}

// A session from an environment whose root has files in top-level
// directories of its own (an image's `COPY app.py /app/`) runs them, its
// commands and file view see them, read-only; the harness's own
// /opt/codecage still works beside the root's /opt.
func TestSessionSeesTheRootsTopLevelDirs(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.StateDir = t.TempDir()
	env := commitEnvironment(t, cfg.StateDir, envstore.Env{Name: "withapp"}, func(root string) error {
		if err := envfixture.MinimalPythonRoot(root); err != nil {
			return err
		}
		for p, body := range map[string]string{"app/main.py": "print('app main')\n", "opt/tool/x.txt": "tool"} {
			dst := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(dst, []byte(body), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "withapp", AllowedImports: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, info.ID, "")
	res, err := svc.Execute(ctx, service.Request{SessionID: info.ID,
		Code: "exec(open('/app/main.py').read())\nprint(open('/opt/tool/x.txt').read())\ntry:\n open('/app/new', 'w')\nexcept OSError as e:\n print(e.strerror)"})
	if err != nil {
		t.Fatal(err)
	}
	// The jail's mount refuses the write (EROFS); gVisor checks /app's
	// mode (root's, 0755) first. Either way nothing reaches the root.
	if got := mustSucceed(t, res); got != "app main\ntool\nRead-only file system\n" && got != "app main\ntool\nPermission denied\n" {
		t.Fatalf("the session's /app and /opt/tool: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(env.RootDir, "app/new")); !os.IsNotExist(err) {
		t.Fatalf("the session wrote into the root's /app: %v", err)
	}
	cmd, err := svc.RunCommand(ctx, service.CommandRequest{Command: "cat /app/main.py /opt/tool/x.txt", SessionID: info.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !cmd.Success || cmd.Stdout != "print('app main')\ntool" {
		t.Fatalf("a command reading /app and /opt/tool: %+v", cmd)
	}
	b, err := svc.ReadFile(ctx, info.ID, "", "/app/main.py")
	if err != nil || string(b) != "print('app main')\n" {
		t.Fatalf("the file view's /app/main.py: %q %v", b, err)
	}
	list, err := svc.ListFiles(ctx, info.ID, "", "/opt")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list.Files {
		names = append(names, f.Path)
	}
	if joined := strings.Join(names, " "); !strings.Contains(joined, "/opt/tool") {
		t.Fatalf("the file view's /opt: %s", joined)
	}
	if _, err := svc.WriteFile(ctx, info.ID, "", "/app/new.py", []byte("x")); !errors.Is(err, service.ErrPermission) {
		t.Fatalf("a write to /app through the file view: %v, want ErrPermission", err)
	}
}
