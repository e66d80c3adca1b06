package service_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/pipfixture"
	"github.com/codecage/codecage/internal/service"
)

// wheelhouse builds a local wheelhouse: greet 1.0 and 2.0 (2.0 needs
// colorlib), colorlib, an sdist-only package, an oversized wheel, and a
// package that depends on a blocked one.
func wheelhouse(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must := func(_ string, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(pipfixture.Wheel(dir, "greet", "1.0", pipfixture.WheelOptions{}))
	must(pipfixture.Wheel(dir, "greet", "2.0", pipfixture.WheelOptions{Requires: []string{"colorlib"}}))
	must(pipfixture.Wheel(dir, "colorlib", "0.3", pipfixture.WheelOptions{}))
	must(pipfixture.Sdist(dir, "onlysource", "1.0"))
	must(pipfixture.Wheel(dir, "hugepkg", "1.0", pipfixture.WheelOptions{PadBytes: 3 << 20}))
	must(pipfixture.Wheel(dir, "badparent", "1.0", pipfixture.WheelOptions{Requires: []string{"evilthing"}}))
	must(pipfixture.Wheel(dir, "evilthing", "1.0", pipfixture.WheelOptions{}))
	return dir
}

func installService(t *testing.T, edit func(*config.Config)) *service.Service {
	cfg := service.LeanTestConfig()
	cfg.PoolSize = 1
	cfg.DataPoolSize = 0
	cfg.StateDir = t.TempDir()
	cfg.PipMaxDownload = 2 << 20
	cfg.BlockedPackages = append(cfg.BlockedPackages, "evilthing")
	edit(&cfg)
	return newServiceWith(t, cfg)
}

func TestPipInstallFromWheelhouse(t *testing.T) {
	wh := wheelhouse(t)
	svc := installService(t, func(c *config.Config) { c.PipFindLinks = wh })
	ctx := context.Background()
	a, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.PipInstall(ctx, service.InstallRequest{Package: "greet", SessionID: a.ID, Owner: "o"})
	if err != nil || !res.Success || res.InstalledVersion == nil || *res.InstalledVersion != "2.0" || len(res.Installed) != 2 {
		t.Fatalf("install: %v %+v", err, res)
	}
	run := func(id, code string) *service.Result {
		r, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "o", Code: code})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := run(a.ID, "import greet, colorlib\ngreet.VALUE + ' / ' + colorlib.VALUE"); !r.Success || string(r.Result) != `"greet 2.0 / colorlib 0.3"` {
		t.Fatalf("import in the session: %+v %+v", r, r.Error)
	}
	if r := run(b.ID, "import greet"); r.Success || r.Error == nil || r.Error.Type != "ImportError" && r.Error.Type != "ModuleNotFoundError" {
		t.Fatalf("another session imported it: %+v", r)
	}
	if r, err := svc.Execute(ctx, service.Request{Code: "import greet"}); err != nil || r.Success {
		t.Fatalf("a stateless run imported it: %v %+v", err, r)
	}
	// A pinned older version replaces it.
	res, err = svc.PipInstall(ctx, service.InstallRequest{Package: "greet", Version: "1.0", SessionID: a.ID, Owner: "o"})
	if err != nil || !res.Success || *res.InstalledVersion != "1.0" {
		t.Fatalf("pinned: %v %+v", err, res)
	}
	// The clear failures.
	for _, c := range []struct{ pkg, version, want string }{
		{"onlysource", "", service.InstallNoWheel},
		{"nosuchpackage", "", service.InstallNotFound},
		{"hugepkg", "", service.InstallTooLarge},
		{"subprocess", "", service.InstallBlocked},
		{"badparent", "", service.InstallBlocked},
		{"greet", "==9.9", service.InstallNotFound},
	} {
		res, err := svc.PipInstall(ctx, service.InstallRequest{Package: c.pkg, Version: c.version, SessionID: a.ID, Owner: "o"})
		if err != nil || res.Success || res.Error == nil || *res.Error != c.want || res.Message == "" {
			t.Errorf("%s %s: %v %+v, want %s", c.pkg, c.version, err, res, c.want)
		}
	}
	if r := run(a.ID, "import evilthing"); r.Success {
		t.Fatal("a blocked dependency stayed installed")
	}
	// Typosquats install with a warning.
	res, _ = svc.PipInstall(ctx, service.InstallRequest{Package: "reqeusts", SessionID: a.ID, Owner: "o"})
	if res == nil || len(res.Warnings) == 0 || !strings.Contains(res.Warnings[0], "requests") {
		t.Fatalf("typosquat: %+v", res)
	}
	// Bad requests.
	for _, pkg := range []string{"--index-url=http://evil", "x; import os", "../x", "git+https://x/y", ""} {
		if _, err := svc.PipInstall(ctx, service.InstallRequest{Package: pkg, SessionID: a.ID, Owner: "o"}); !errors.Is(err, service.ErrInvalidRequest) {
			t.Errorf("%q: %v", pkg, err)
		}
	}
	if _, err := svc.PipInstall(ctx, service.InstallRequest{Package: "greet", Owner: "o"}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Errorf("no session: %v", err)
	}
	if _, err := svc.PipInstall(ctx, service.InstallRequest{Package: "greet", SessionID: a.ID, Owner: "mallory"}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Errorf("another owner: %v", err)
	}
	_ = os.Getpid
}

// TestPipInstallFromIndex: pip reaches a PEP 503 index (served here on
// loopback) through the egress proxy, allowed to that index only.
func TestPipInstallFromIndex(t *testing.T) {
	dir := t.TempDir()
	if _, err := pipfixture.Wheel(dir, "idx-greet", "1.5", pipfixture.WheelOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pipfixture.Sdist(dir, "srconly", "2.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := pipfixture.Wheel(dir, "bigone", "1.0", pipfixture.WheelOptions{PadBytes: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	idx, err := pipfixture.ServeIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	svc := installService(t, func(c *config.Config) { c.PipIndexURL = idx.URL })
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.PipInstall(ctx, service.InstallRequest{Package: "idx_greet", SessionID: se.ID, Owner: "o"})
	if err != nil || !res.Success || *res.InstalledVersion != "1.5" {
		t.Fatalf("install: %v %+v", err, res)
	}
	if idx.Requests("/simple/idx-greet/") == 0 {
		t.Fatal("pip never asked the index")
	}
	r, err := svc.Execute(ctx, service.Request{SessionID: se.ID, Owner: "o", Code: "import idx_greet\nidx_greet.VALUE"})
	if err != nil || !r.Success || !strings.Contains(string(r.Result), "1.5") {
		t.Fatalf("import: %v %+v", err, r)
	}
	for pkg, want := range map[string]string{"srconly": service.InstallNoWheel, "absent": service.InstallNotFound, "bigone": service.InstallTooLarge} {
		res, err := svc.PipInstall(ctx, service.InstallRequest{Package: pkg, SessionID: se.ID, Owner: "o"})
		if err != nil || res.Success || *res.Error != want {
			t.Errorf("%s: %v %+v, want %s", pkg, err, res, want)
		}
	}
}
