package gvisor

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

var probes sync.Map // Runtime -> *probeOnce

type probeOnce struct {
	once sync.Once
	info Availability
}

// Probe reports whether gVisor sandboxes run on this host with rt, by
// running one (`/bin/true`), and on which platform. The answer is kept
// for the process's life.
func Probe(rt Runtime) Availability {
	if rt.Platform == PlatformAuto {
		rt.Platform = ""
	}
	v, _ := probes.LoadOrStore(rt, &probeOnce{})
	p := v.(*probeOnce)
	p.once.Do(func() { p.info = probe(rt) })
	return p.info
}

func probe(rt Runtime) Availability {
	info := Availability{Platform: PlatformPtrace}
	if rt.Platform != "" {
		info.Platform = rt.Platform
	}
	bin, err := rt.binary()
	if err != nil {
		info.Error = err.Error()
		return info
	}
	info.Runsc = bin
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		info.Error = fmt.Sprintf("%s --version: %v", bin, err)
		return info
	}
	info.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	info.Platforms = platformsOf(bin)
	candidates := []string{info.Platform}
	if rt.Platform == "" && slices.Contains(info.Platforms, PlatformSystrap) {
		// systrap is runsc's own default since 2023 and much faster than
		// ptrace; ptrace stays the fallback where it cannot run (it needs
		// seccomp's user notification and a kernel of 4.12 or newer).
		candidates = []string{PlatformSystrap, PlatformPtrace}
	}
	var failures []string
	for _, platform := range candidates {
		try := rt
		try.Platform = platform
		took, err := trial(try)
		if err != nil {
			failures = append(failures, platform+": "+err.Error())
			continue
		}
		info.Available, info.Platform, info.StartupSeconds = true, platform, took.Seconds()
		info.EnforcesNoexec = refusesNoexecCode(try)
		if len(failures) > 0 {
			info.PlatformNote = "a sandbox failed on " + strings.Join(failures, "; ")
		}
		return info
	}
	info.Platform = candidates[0]
	info.Error = strings.Join(failures, "; ")
	if len(candidates) == 1 {
		info.Error = strings.TrimPrefix(info.Error, candidates[0]+": ")
	}
	return info
}

// refusesNoexecCode reports whether the dynamic loader fails to run a copy
// of /bin/true from the sandbox's noexec /tmp, as on Linux.
func refusesNoexecCode(rt Runtime) bool {
	f, err := elf.Open("/bin/true")
	if err != nil {
		return false
	}
	defer f.Close()
	loader := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				loader = strings.TrimRight(string(b), "\x00")
			}
		}
	}
	if loader == "" {
		return false
	}
	// Exit 0: the copy ran. 3: it could not even be made (an inconclusive
	// sandbox counts as not refusing).
	_, err = trial(rt, "/bin/sh", "-c", `cat /bin/true > /tmp/t || exit 3; exec "$0" /tmp/t`, loader)
	var exitErr *trialExit
	return errors.As(err, &exitErr) && exitErr.code != 0 && exitErr.code != 3
}

// trialExit is a trial's program that exited other than 0.
type trialExit struct {
	code   int
	detail string
}

func (e *trialExit) Error() string { return e.detail }

// trial runs argv (default /bin/true) in a sandbox of rt, whose platform
// is set.
func trial(rt Runtime, argv ...string) (time.Duration, error) {
	if len(argv) == 0 {
		argv = []string{"/bin/true"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	start := time.Now()
	sb, err := Start(ctx, rt, jail.Spec{Argv: argv, Limits: jail.Limits{Timeout: 30 * time.Second}, Stderr: &stderr})
	if err != nil {
		return 0, err
	}
	exit := sb.Wait()
	if exit.Limit != jail.LimitNone || exit.Signal != 0 {
		return 0, fmt.Errorf("a test sandbox failed (exit %d, signal %d, limit %q): %s", exit.ExitCode, exit.Signal, exit.Limit, strings.TrimSpace(stderr.String()+"\n"+sb.Log()))
	}
	if exit.ExitCode != 0 {
		return 0, &trialExit{exit.ExitCode, fmt.Sprintf("a test sandbox failed (exit %d): %s", exit.ExitCode, strings.TrimSpace(stderr.String()+"\n"+sb.Log()))}
	}
	return time.Since(start), nil
}

// platformsOf lists the platforms bin offers, from the description of its
// --platform flag ("specifies which platform to use: systrap (default),
// ptrace, kvm."); runsc's own `platforms` command is not in every build.
func platformsOf(bin string) []string {
	out, _ := exec.Command(bin, "flags").CombinedOutput()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		_, desc, ok := strings.Cut(line, "specifies which platform to use:")
		if !ok {
			continue
		}
		for _, p := range []string{PlatformSystrap, PlatformPtrace, PlatformKVM} {
			if strings.Contains(desc, p) {
				names = append(names, p)
			}
		}
		return names
	}
	return []string{PlatformPtrace, PlatformKVM} // what every runsc had
}
