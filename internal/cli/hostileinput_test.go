package cli

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRunEndlessInputIsRefusedAtTheCodeLimit feeds /dev/zero to a real
// `codecage run`, as a file and as stdin: it must refuse at the code limit
// naming it, in seconds, with its peak RSS (measured by the kernel) far
// below the gigabytes an unbounded read takes.
// peakRSSLauncher runs argv[1:] as its child and, once it exits, prints
// the child's peak RSS (the kernel's, from wait4) and exits as it did.
const peakRSSLauncher = `import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write("peak_rss_kib=%d\n" % usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
`

func TestRunEndlessInputIsRefusedAtTheCodeLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		stdin bool
	}{
		{"file", []string{"/dev/zero"}, false},
		{"stdin", nil, true},
		{"stdin with a set limit", []string{"--max-code-size", "64k", "-"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// The kernel's peak RSS of a process carries over an exec from
			// the image it replaced: started from this (large) test process
			// it would report the test's own peak. A small python parent
			// forks, execs `codecage run` and reports that child's peak.
			argv := append([]string{"-c", peakRSSLauncher, os.Args[0], "run", "--state-dir", t.TempDir()}, tc.args...)
			cmd := exec.CommandContext(ctx, "/usr/bin/python3", argv...)
			cmd.Env = append(os.Environ(), cliMainEnv+"=1")
			if tc.stdin {
				f, err := os.Open("/dev/zero")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd.Stdin = f
			}
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("still reading after 20 s (killed): %.300s", out)
			}
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != exitUsage {
				t.Fatalf("want exit %d, got %v: %.300s", exitUsage, err, out)
			}
			want := "larger than the limit of 4194304 bytes"
			if strings.Contains(strings.Join(tc.args, " "), "64k") {
				want = "larger than the limit of 65536 bytes"
			}
			if !strings.Contains(string(out), want) || !strings.Contains(string(out), "SANDBOX_MAX_CODE_SIZE") {
				t.Fatalf("message does not name the limit (want %q): %.300s", want, out)
			}
			m := regexp.MustCompile(`peak_rss_kib=(\d+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("the launcher reported no peak RSS: %.300s", out)
			}
			rssKiB, _ := strconv.Atoi(string(m[1]))
			if rssKiB > 128<<10 {
				t.Fatalf("peak RSS %d MiB reading an endless input (want well under 128 MiB)", rssKiB>>10)
			}
			t.Logf("refused with peak RSS %d MiB", rssKiB>>10)
		})
	}
}
