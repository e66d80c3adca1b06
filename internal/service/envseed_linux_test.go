package service_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// A session from an environment whose root has files at the session's
// home (/home/user, as an E2B template's) starts with a copy of them in
// its workspace, its code's to change; links are copied as links, never
// followed; a FIFO and a file larger than the workspace are left out.
// Judged from the host: the workspace's files, their owner, the link.
func TestSessionStartsWithTheRootsHome(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	cfg.StateDir = t.TempDir()
	cfg.WorkspaceMax = 1 << 20
	env := commitEnvironment(t, cfg.StateDir, envstore.Env{Name: "withhome"}, func(root string) error {
		if err := envfixture.MinimalPythonRoot(root); err != nil {
			return err
		}
		home := filepath.Join(root, "home/user")
		for p, body := range map[string]string{"readme.txt": "from the template\n", "src/app.py": "print('app')\n"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(home, p)), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(home, p), []byte(body), 0o644); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(home, "big.bin"), bytes.Repeat([]byte("x"), 2<<20), 0o644); err != nil {
			return err
		}
		if err := os.Symlink("../../../../../etc/shadow", filepath.Join(home, "escape")); err != nil {
			return err
		}
		if err := syscall.Mkfifo(filepath.Join(home, "fifo"), 0o644); err != nil {
			return err
		}
		return nil
	})
	svc := newServiceWith(t, cfg)
	seeds := &seedEvents{}
	svc.SetObserver(seeds)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Environment: "withhome", Home: "/home/user", AllowedImports: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, info.ID, "")
	res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Code: "import os\n" +
		"print(open('readme.txt').read(), end='')\nexec(open('/home/user/src/app.py').read())\n" +
		"open('readme.txt', 'a').write('changed\\n')\nprint(sorted(os.listdir('.')), os.readlink('escape'), os.path.exists('escape'))"})
	if err != nil {
		t.Fatal(err)
	}
	want := "from the template\napp\n['escape', 'readme.txt', 'src'] ../../../../../etc/shadow False\n"
	if got := mustSucceed(t, res); got != want {
		t.Fatalf("the session's home: %q, want %q", got, want)
	}
	// From the host: the workspace holds the copy, the sandbox's, changed.
	var ws string
	filepath.WalkDir(cfg.StateDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "readme.txt" && !strings.HasPrefix(p, filepath.Join(cfg.StateDir, "environments")) {
			ws = filepath.Dir(p)
		}
		return nil
	})
	if ws == "" {
		t.Fatal("no copy of readme.txt under the state directory")
	}
	b, err := os.ReadFile(filepath.Join(ws, "readme.txt"))
	if err != nil || string(b) != "from the template\nchanged\n" {
		t.Fatalf("the workspace's readme.txt: %q %v", b, err)
	}
	var fst syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(ws, "src/app.py"), &fst); err != nil || fst.Uid == 0 {
		t.Fatalf("src/app.py: uid %d %v, want the sandbox's", fst.Uid, err)
	}
	if l, err := os.Readlink(filepath.Join(ws, "escape")); err != nil || l != "../../../../../etc/shadow" {
		t.Fatalf("escape: %q %v, want the link as it was", l, err)
	}
	for _, p := range []string{"big.bin", "fifo"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !os.IsNotExist(err) {
			t.Errorf("%s was copied: %v", p, err)
		}
	}
	// What was left out is named, with why.
	seeds.mu.Lock()
	detail := strings.Join(seeds.details, "\n")
	seeds.mu.Unlock()
	if !strings.Contains(detail, `"big.bin": 2097152 bytes do not fit`) || !strings.Contains(detail, `"fifo": not a regular file`) {
		t.Errorf("the seed event: %q", detail)
	}
	// The root's own copy is unchanged.
	if b, _ := os.ReadFile(filepath.Join(env.RootDir, "home/user/readme.txt")); string(b) != "from the template\n" {
		t.Fatalf("the root's readme.txt changed: %q", b)
	}
}

type seedEvents struct {
	mu      sync.Mutex
	details []string
}

func (e *seedEvents) Observe(ev service.Event) {
	if ev.Action == "seed" {
		e.mu.Lock()
		e.details = append(e.details, ev.Outcome+": "+ev.Detail)
		e.mu.Unlock()
	}
}
