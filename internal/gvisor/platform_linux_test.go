package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
)

// runscLogging is a runsc that records the arguments of each call in the
// returned file, then runs real.
func runscLogging(t *testing.T, real string) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "runsc"), filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// platformsRun returns the --platform of each `runsc run` recorded in log.
func platformsRun(t *testing.T, log string) []string {
	t.Helper()
	b, _ := os.ReadFile(log)
	var got []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, " run --bundle ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if p, ok := strings.CutPrefix(f, "--platform="); ok {
				got = append(got, p)
			}
		}
	}
	return got
}

// TestPlatformPick: with no platform set, sandboxes run on systrap where
// the runsc offers it (runsc itself is asked which platform it ran), on
// ptrace where it does not (Debian's runsc), and on the platform set when
// one is.
func TestPlatformPick(t *testing.T) {
	def := gvisor.Probe(gvisor.Runtime{})
	if !def.Available {
		t.Fatalf("gVisor does not work here: %s", def.Error)
	}
	bin, log := runscLogging(t, def.Runsc)
	info := gvisor.Probe(gvisor.Runtime{Runsc: bin, Platform: gvisor.PlatformAuto})
	want := gvisor.PlatformPtrace
	if slices.Contains(info.Platforms, gvisor.PlatformSystrap) {
		want = gvisor.PlatformSystrap
	}
	if !info.Available || info.Platform != want || info.PlatformNote != "" || info.Version != def.Version {
		t.Fatalf("probe of %s: %+v, want platform %s", def.Runsc, info, want)
	}
	// Two sandboxes: /bin/true, then the check of noexec mounts.
	if got := platformsRun(t, log); !slices.Equal(got, []string{want, want}) {
		t.Fatalf("the probe ran runsc on %q, want [%s %s]", got, want, want)
	}
	// A sandbox of that runsc, its platform unset, runs on the one picked.
	sb, err := gvisor.Start(context.Background(), gvisor.Runtime{Runsc: bin, StateDir: t.TempDir()}, jail.Spec{Argv: []string{"/bin/true"}, Limits: jail.Limits{Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if exit := sb.Wait(); exit.ExitCode != 0 {
		t.Fatalf("sandbox: %+v %s", exit, sb.Log())
	}
	if got := platformsRun(t, log); !slices.Equal(got, []string{want, want, want}) {
		t.Fatalf("runsc ran on %q, want [%s %s %s]", got, want, want, want)
	}

	// Set explicitly, the platform is the one used.
	bin, log = runscLogging(t, def.Runsc)
	if info := gvisor.Probe(gvisor.Runtime{Runsc: bin, Platform: gvisor.PlatformPtrace}); !info.Available || info.Platform != gvisor.PlatformPtrace {
		t.Fatalf("ptrace set: %+v", info)
	}
	if got := platformsRun(t, log); !slices.Equal(got, []string{gvisor.PlatformPtrace, gvisor.PlatformPtrace}) {
		t.Fatalf("ptrace set, runsc ran on %q", got)
	}

	// Debian 12's runsc (2022) has no systrap: ptrace.
	const debian = "/usr/bin/runsc"
	if _, err := os.Stat(debian); err != nil {
		t.Fatalf("Debian's runsc is missing (scripts/setup.sh installs it as the fallback): %v", err)
	}
	old := gvisor.Probe(gvisor.Runtime{Runsc: debian})
	if !old.Available || old.Platform != gvisor.PlatformPtrace || slices.Contains(old.Platforms, gvisor.PlatformSystrap) {
		t.Fatalf("Debian's runsc: %+v", old)
	}
	// Its loader maps code from noexec /tmp (run_command's allow-list
	// would not hold there); the pinned build's kernel refuses it.
	if old.EnforcesNoexec {
		t.Fatalf("Debian's runsc is said to refuse code from noexec mounts: %+v", old)
	}
	if def.Runsc == gvisor.PinnedRunsc && !def.EnforcesNoexec {
		t.Fatalf("the pinned runsc is said to map code from noexec mounts: %+v", def)
	}
}
