package gvisor_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
)

// mountedUnder lists the host's mount points at or below dir, as this
// process sees them.
func mountedUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			found = append(found, f[4])
		}
	}
	return found
}

// TestNothingStaysMounted: runsc mounts under the sandbox's state
// directory (a current one pins its gofers' network namespace at
// state/null-netns); after a sandbox that ran, one whose program could not
// start, and one killed while it booted, nothing of it is mounted on the
// host and the directory is gone.
func TestNothingStaysMounted(t *testing.T) {
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	cases := []struct {
		name string
		argv []string
		kill time.Duration // > 0: kill the sandbox this long after Start
		ok   bool
	}{
		{"ran", []string{"/bin/true"}, 0, true},
		{"no such program", []string{"/nonexistent/program"}, 0, false},
		{"killed while booting", []string{"/bin/sleep", "30"}, 150 * time.Millisecond, false},
		{"killed while running", []string{"/bin/sleep", "30"}, 2 * time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			var stderr bytes.Buffer
			sb, err := gvisor.Start(context.Background(), gvisor.Runtime{StateDir: state}, jail.Spec{
				Argv: c.argv, Limits: jail.Limits{Timeout: 30 * time.Second}, Stderr: &stderr,
			})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if c.kill > 0 {
				time.Sleep(c.kill)
				sb.Kill(jail.LimitCanceled)
			}
			exit := sb.Wait()
			if (exit.ExitCode == 0 && exit.Limit == jail.LimitNone) != c.ok {
				t.Fatalf("exit %+v, stderr %q, log %s", exit, stderr.String(), sb.Log())
			}
			if m := mountedUnder(t, state); len(m) > 0 {
				t.Fatalf("still mounted on the host after the sandbox: %v", m)
			}
			if left, _ := os.ReadDir(state); len(left) != 0 {
				t.Fatalf("the bundle outlived the sandbox: %v", left)
			}
		})
	}
}
