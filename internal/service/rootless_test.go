package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// rootlessProbeEnv makes the test binary run rootlessProbe instead of the
// tests: TestRootless starts it as an unprivileged user.
const rootlessProbeEnv = "CODECAGE_ROOTLESS_PROBE"

// rootlessCases are run by an unprivileged user; the test asserts on them.
var rootlessCases = map[string]struct {
	code   string
	memory int64
}{
	"identity": {code: `import os
print(os.getuid(), [l for l in open("/proc/self/status") if l.startswith(("CapEff", "NoNewPrivs", "Seccomp:"))])`},
	"network": {code: `import socket
try:
    socket.create_connection(("1.1.1.1", 443), timeout=2); print("connected")
except OSError as e: print("blocked", e.errno)`},
	"memory":    {code: "x = bytearray(200 << 20)\nprint('allocated')", memory: 64 << 20},
	"forkbomb":  {code: "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e: print('stopped', n)"},
	"hostfiles": {code: "import os\nprint(sorted(os.listdir('/')), os.path.exists('/root'), os.path.exists('/etc/shadow'))"},
}

// rootlessProbe runs rootlessCases and prints one JSON result per line.
func rootlessProbe(w io.Writer) int {
	cfg := service.LeanTestConfig()
	cfg.AllowedImports = []string{policy.AllImports}
	svc, err := service.New(cfg, nil)
	if err != nil {
		fmt.Fprintln(w, "service:", err)
		return 1
	}
	out := map[string]*service.Result{}
	for name, c := range rootlessCases {
		res, err := svc.Execute(context.Background(), service.Request{Code: c.code, AllowedImports: []string{"*"}, MemoryBytes: c.memory, Timeout: 20 * time.Second})
		if err != nil {
			fmt.Fprintln(w, name, "execute:", err)
			return 1
		}
		out[name] = res
	}
	_ = json.NewEncoder(w).Encode(out)
	return 0
}

// TestRootless runs sandboxes as an ordinary user: one mapped uid, no
// cgroups (not delegated), rlimits instead, and every result says so.
func TestRootless(t *testing.T) {
	var raw []byte
	if os.Geteuid() != 0 {
		var b strings.Builder
		if rootlessProbe(&b) != 0 {
			t.Fatal(b.String())
		}
		raw = []byte(b.String())
	} else {
		// The binary must be reachable by the unprivileged user.
		dir, err := os.MkdirTemp("", "codecage-rootless-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		self, _ := os.Executable()
		bin := filepath.Join(dir, "probe.test")
		data, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Dir = dir
		cmd.Env = []string{rootlessProbeEnv + "=1", "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		// The results are stdout; the service's log lines go to stderr.
		var stderr strings.Builder
		cmd.Stderr = &stderr
		raw, err = cmd.Output()
		if err != nil {
			t.Fatalf("rootless probe: %v\n%s%s", err, raw, stderr.String())
		}
	}
	var res map[string]*service.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("probe output: %v\n%s", err, raw)
	}
	id := res["identity"]
	if !id.Success || !id.Isolation.Rootless || !strings.HasPrefix(id.Stdout, "1000 ") ||
		!strings.Contains(id.Stdout, `CapEff:\t0000000000000000`) || !strings.Contains(id.Stdout, `NoNewPrivs:\t1`) || !strings.Contains(id.Stdout, `Seccomp:\t2`) {
		t.Errorf("identity: %+v %q", id.Isolation, id.Stdout)
	}
	if id.Isolation.Cgroup == "none" && len(id.Isolation.Warnings) == 0 {
		t.Errorf("missing cgroups must be reported: %+v", id.Isolation)
	}
	if out := res["network"].Stdout; !strings.HasPrefix(out, "blocked") {
		t.Errorf("network: %q", out)
	}
	if m := res["memory"]; m.Success || m.Limit == nil || *m.Limit != "memory" {
		t.Errorf("memory limit not enforced rootless: %+v", m)
	}
	if f := res["forkbomb"]; !strings.HasPrefix(f.Stdout, "stopped") {
		t.Errorf("fork bomb not stopped: %q %+v", f.Stdout, f.Error)
	}
	if h := res["hostfiles"].Stdout; !strings.Contains(h, "False False") || strings.Contains(h, "'root'") {
		t.Errorf("host files visible: %q", h)
	}
}
