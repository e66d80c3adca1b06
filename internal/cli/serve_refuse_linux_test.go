package cli

import (
	"context"
	"github.com/codecage/codecage/internal/fleet"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// serveRefused runs `serve` as a real process (wrapped by prefix, if any)
// and returns its exit code and stderr; it must end on its own.
func serveRefused(t *testing.T, prefix []string, env ...string) (int, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append(append(prefix, exe), "serve", "--listen", "127.0.0.1:0")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), append([]string{cliMainEnv + "=1"}, env...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, _ := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("serve did not end on its own: stdout %q stderr %q", out, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// A pod whose runtime ignored hostUsers: false (containerd before 2.0 does,
// silently) runs on the host's ids: the chart's
// SANDBOX_REQUIRE_USER_NAMESPACE makes serve refuse at start, saying so,
// instead of serving with the host's root. This host runs on its own ids.
func TestServeRefusesWhenTheUserNamespaceItWasPromisedIsMissing(t *testing.T) {
	if onHost, _ := fleet.OwnIDMap(); !onHost {
		t.Fatal("this test runs on the host's ids; it runs in a user namespace")
	}
	code, stderr := serveRefused(t, nil, "SANDBOX_REQUIRE_USER_NAMESPACE=true")
	if code != exitFailure || !strings.Contains(stderr, "FAIL  own user namespace") || !strings.Contains(stderr, "containerd before 2.0") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

// A container without the capabilities root mode needs (Kubernetes:
// capabilities drop ALL and nothing added) fails at start naming them,
// not at the first run. The capabilities are really taken away
// (setpriv's bounding set), as a runtime does.
func TestServeRefusesWithoutTheCapabilitiesItNeeds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("root mode's capabilities are tested as root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal(err)
	}
	code, stderr := serveRefused(t, []string{setpriv, "--bounding-set", "-setuid,-setgid,-chown", "--"})
	if code != exitFailure || !strings.Contains(stderr, "FAIL  capabilities") ||
		!strings.Contains(stderr, "missing CAP_SETUID, CAP_SETGID, CAP_CHOWN") ||
		!strings.Contains(stderr, "capabilities.add: [SETUID, SETGID, CHOWN]") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	// The doctor says the same, with every other layer.
	cmd := exec.Command(setpriv, "--bounding-set", "-setuid,-setgid,-chown", "--", os.Args[0], "doctor")
	cmd.Env = append(os.Environ(), cliMainEnv+"=1")
	out, err := cmd.Output()
	if cmd.ProcessState.ExitCode() != exitFailure || !strings.Contains(string(out), "FAIL  capabilities") {
		t.Fatalf("doctor without capabilities: %v\n%s", err, out)
	}
}
