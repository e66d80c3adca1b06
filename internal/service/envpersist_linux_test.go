package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

// commitEnv commits into the store at dir an environment named name: a
// minimal Python root whose /usr/share/codecage-build says mark, and a
// layer whose module envpmod has VALUE mark. Another mark is other
// content (another ID and root); the same mark, the same.
func commitEnv(t *testing.T, dir, name, mark string) envstore.Env {
	t.Helper()
	store, err := envstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Stage()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Abort()
	if err := os.Remove(st.Root()); err != nil {
		t.Fatal(err)
	}
	if err := envfixture.MinimalPythonRoot(st.Root()); err != nil {
		t.Fatal(err)
	}
	for p, content := range map[string]string{
		filepath.Join(st.Root(), "usr", "share", "codecage-build"): mark,
		filepath.Join(st.Layer(), "envpmod", "__init__.py"):        "VALUE = " + `"` + mark + `"` + "\n",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, err := store.Commit(st, envstore.Env{Name: name, Source: envstore.Source{Kind: "image"}, Python: "/usr/bin/python3",
		Modules: []string{"envpmod"}, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// envProbe prints what a session sees of its environment: the root's
// build mark, the layer's module, the root's os-release, and x.
const envProbe = "import envpmod\nprint(open('/usr/share/codecage-build').read(), envpmod.VALUE, 'codecage-fixture' in open('/etc/os-release').read(), x)"

// A session started from an environment keeps it through a pause, a
// snapshot, a fork and a park, natively and under gVisor (its memory
// image): each copy sees the root's files and the layer's module, and
// says its environment. A parked session holds no use of it: the
// operator's rm and gc free its root on the host, and the resume then
// fails naming the environment; after a rebuild under the same name with
// other content it is refused (the content changed); after a rebuild with
// the same content it comes back whole. A snapshot is judged the same.
func TestEnvironmentFollowsSavedSessions(t *testing.T) {
	for _, backend := range []string{config.IsolationNative, config.IsolationGVisor} {
		t.Run(backend, func(t *testing.T) { testEnvironmentFollowsSavedSessions(t, backend == config.IsolationGVisor) })
	}
}

func testEnvironmentFollowsSavedSessions(t *testing.T, gvisor bool) {
	stateDir := t.TempDir()
	envDir := filepath.Join(stateDir, "environments")
	svc := containerService(t, func(c *config.Config) {
		c.StateDir, c.EnvironmentsDir = stateDir, envDir
		c.PoolSize, c.GVisorPoolSize, c.SessionPoolSize = 0, 0, 0
		c.MachinePoolSize = 0
	})
	ctx := context.Background()
	envA := commitEnv(t, envDir, "persist", "A")
	want := "A A True 41\n"
	open := func(manual bool) string {
		info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Environment: "persist", UseContainer: gvisor, ManualResume: manual})
		if err != nil {
			t.Fatal(err)
		}
		if info.Environment != "persist" {
			t.Fatalf("the session's environment: %q", info.Environment)
		}
		if res := inSession(t, svc, info.ID, "alice", "x = 41"); !res.Success {
			t.Fatalf("setup: %+v", res.Error)
		}
		return info.ID
	}
	probe := func(what, id string) {
		t.Helper()
		res := inSession(t, svc, id, "alice", envProbe)
		if res.Stdout != want {
			t.Fatalf("%s: %q (error %+v), want %q", what, res.Stdout, res.Error, want)
		}
		info, err := svc.GetSession(ctx, id, "alice")
		if err != nil || info.Environment != "persist" {
			t.Fatalf("%s: the session's environment: %+v %v", what, info, err)
		}
	}
	id := open(false)
	probe("the session", id)
	var live []string
	// Paused in memory, resumed.
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	probe("after a pause", id)
	// A snapshot, and a session from it.
	snap, err := svc.SnapshotSession(ctx, id, "alice", "in-env")
	if err != nil {
		t.Fatal(err)
	}
	copyInfo, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	probe("a session from its snapshot", copyInfo.ID)
	live = append(live, copyInfo.ID)
	// A fork.
	forks, err := svc.ForkSession(ctx, id, "alice", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	probe("its fork", forks[0].Session.ID)
	live = append(live, forks[0].Session.ID)
	// Parked, resumed.
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	probe("after a park", id)
	live = append(live, id)

	// A parked session, and the environment removed and collected: the
	// parked session holds no use of it, so its root goes from the host.
	parked := open(true)
	if _, err := svc.PauseSession(ctx, parked, "alice", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	// Removed while sessions of it live: their root stays on the host
	// through a collection, and a fork of one still starts on it.
	if err := svc.RemoveEnvironment(ctx, "persist"); err != nil {
		t.Fatal(err)
	}
	if r, err := svc.CollectEnvironments(ctx); err != nil || len(r.Deferred) != 1 || r.Deferred[0] != envA.ID || r.Roots != 0 {
		t.Fatalf("gc while sessions of the environment live: %+v %v", r, err)
	}
	if _, err := os.Stat(envA.RootDir); err != nil {
		t.Fatalf("the root of live sessions went: %v", err)
	}
	forks, err = svc.ForkSession(ctx, id, "alice", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("a fork after the environment's removal: %+v %v", forks, err)
	}
	if forks[0].Error != nil {
		t.Fatalf("a fork after the environment's removal: %+v", forks[0].Error)
	}
	probe("a fork after the environment's removal", forks[0].Session.ID)
	live = append(live, forks[0].Session.ID)
	for _, l := range live {
		if err := svc.CloseSession(ctx, l, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := svc.CollectEnvironments(ctx); err != nil || len(r.Deferred) != 0 || r.Roots != 1 {
		t.Fatalf("gc with only a parked session and a snapshot of the environment: %+v %v", r, err)
	}
	if _, err := os.Stat(envA.RootDir); !os.IsNotExist(err) {
		t.Fatalf("the removed environment's root is still on the host: %v", err)
	}
	refused := func(what, kind, says string) {
		t.Helper()
		_, _, err := svc.ResumeSession(ctx, parked, "alice")
		if service.ErrorKind(err) != kind || !strings.Contains(err.Error(), `"persist"`) || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: resuming the parked session: %v, want %s naming the environment and saying %q", what, err, kind, says)
		}
		_, err = svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
		if service.ErrorKind(err) != kind || !strings.Contains(err.Error(), `"persist"`) || !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: a session from the snapshot: %v, want %s naming the environment and saying %q", what, err, kind, says)
		}
		// The parked session is still the caller's, parked.
		if info, err := svc.GetSession(ctx, parked, "alice"); err != nil || info.State != "paused" {
			t.Fatalf("%s: the parked session after a refused resume: %+v %v", what, info, err)
		}
	}
	refused("removed", service.KindEnvironmentNotFound, "removed since")
	// Rebuilt under the same name with other content: refused.
	envB := commitEnv(t, envDir, "persist", "B")
	if envB.ID == envA.ID || envB.RootDir == envA.RootDir {
		t.Fatalf("other content, same ID or root: %s %s", envB.ID, envB.RootDir)
	}
	refused("rebuilt", service.KindSnapshotUnusable, "rebuilt since")
	// Rebuilt with the same content: the same environment again.
	if err := svc.RemoveEnvironment(ctx, "persist"); err != nil {
		t.Fatal(err)
	}
	if again := commitEnv(t, envDir, "persist", "A"); again.ID != envA.ID || again.RootDir != envA.RootDir {
		t.Fatalf("the same content has another ID or root: %s %s, was %s %s", again.ID, again.RootDir, envA.ID, envA.RootDir)
	}
	if _, _, err := svc.ResumeSession(ctx, parked, "alice"); err != nil {
		t.Fatalf("resume on the same content: %v", err)
	}
	probe("the parked session on the same content", parked)
	copyInfo, err = svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatalf("a session from the snapshot on the same content: %v", err)
	}
	probe("a session from the snapshot on the same content", copyInfo.ID)
}
