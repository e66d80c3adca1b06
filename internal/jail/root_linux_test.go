package jail

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envfixture"
)

// minimalRoot builds a minimal Python root (not the host's) for a test.
func minimalRoot(t testing.TB) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		t.Fatal(err)
	}
	return root
}

func hostileRoot(t *testing.T, kind string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := envfixture.HostileRoot(root, kind); err != nil {
		t.Fatal(err)
	}
	return root
}

// A sandbox with a root runs the root's Python and shell; what only the
// host has (numpy, perl) is not there.
func TestRootRunsTheRootsPythonAndNothingOfTheHost(t *testing.T) {
	for _, p := range []string{"/usr/bin/perl", "/usr/lib/python3/dist-packages/numpy"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the host lacks %s, which this test expects to be missing inside: %v", p, err)
		}
	}
	root := minimalRoot(t)
	exit, out, errOut := startAndWait(t, Spec{Root: root, Argv: []string{"/usr/bin/python3", "-c", "import sys; print(sys.version)"}})
	if exit.ExitCode != 0 || !strings.HasPrefix(out, "3.") {
		t.Fatalf("python: %+v %q %q", exit, out, errOut)
	}
	exit, out, errOut = startAndWait(t, Spec{Root: root, Argv: []string{"/usr/bin/python3", "-c", "import numpy"}})
	if exit.ExitCode == 0 || !strings.Contains(errOut, "No module named 'numpy'") {
		t.Fatalf("numpy, a host package, was importable: %+v %q %q", exit, out, errOut)
	}
	exit, out, errOut = startAndWait(t, Spec{Root: root, Argv: []string{"/bin/sh", "-c",
		"echo shell; ls /usr/bin; test -e /usr/bin/perl && echo HOST-PERL; cat /etc/os-release; id -u"}})
	if exit.ExitCode != 0 || !strings.HasPrefix(out, "shell\n") || strings.Contains(out, "HOST-PERL") || strings.Contains(out, "perl") ||
		!strings.Contains(out, "ID=codecage-fixture") || !strings.HasSuffix(out, "1000\n") {
		t.Fatalf("shell: %+v %q %q", exit, out, errOut)
	}
}

// Each hostile root is refused with a clear error, or its sandbox shows
// no host file: judged from the host, every system mount of the running
// program comes from beneath the root, read-only, nosuid and nodev, and
// the program runs as the sandbox's uid with no privilege.
func TestRootContainmentHostileRoots(t *testing.T) {
	// The shell script prints HOST if it sees a file of the host's (the
	// sandbox's generated /etc has passwd, never shadow; the hostile
	// roots have no perl, no python3).
	for _, p := range []string{"/usr/bin/perl", "/usr/bin/python3", "/etc/shadow"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the host lacks %s, which this test expects to be missing inside: %v", p, err)
		}
	}
	probe := "for f in /usr/bin/perl /usr/bin/python3 /etc/shadow /etc/alternatives/shadow /sbin/etc/shadow /sbin/usr/bin/perl " +
		"/lib32/etc/shadow /libx32/usr/bin/perl /usr/shadow /usr/etc/shadow /etc/ssl/certs /etc/os-release/..; do test -e $f && echo HOST $f; done; " +
		"read -r l < /etc/ld.so.cache; case $l in root:*) echo HOST cache;; esac; id -u; exec cat"
	cases := []struct {
		kind    string
		refused string // a word of the error, when the root is refused
	}{
		{envfixture.UsrToHost, ""},
		{envfixture.UsrUp, ""},
		{envfixture.ProcRoot, ""},
		{envfixture.AlternativesToEtc, ""},
		{envfixture.CacheToShadow, ""},
		{envfixture.Setuid, ""},
		{envfixture.Lib64Proc, "start /bin/sh"}, // the loader is no host file: nothing runs
		{envfixture.EtcUp, "too many levels of symbolic links"},
		{envfixture.WritableDir, "writable by group or others"},
		{envfixture.WritableRoot, "writable by group or others"},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			root := hostileRoot(t, c.kind)
			var out, errOut bytes.Buffer
			sb, err := Start(context.Background(), Spec{Root: root, Argv: []string{"/bin/sh", "-c", probe}, Stdin: true,
				Stdout: &out, Stderr: &errOut, Limits: Limits{Timeout: 20 * time.Second}})
			if c.refused != "" {
				if err == nil {
					sb.Kill(LimitNone)
					sb.Wait()
					t.Fatalf("the root was not refused (want an error with %q)", c.refused)
				}
				if !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("error %q, want one with %q", err, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer sb.Channel().Close()
			defer sb.Kill(LimitNone)
			pid := waitForProgram(t, sb.HostUID(), "cat")
			checkRootMounts(t, pid, root)
			checkUnprivileged(t, pid, sb.HostUID())
			if err := sb.CloseInput(); err != nil {
				t.Fatal(err)
			}
			exit := sb.Wait()
			if exit.ExitCode != 0 || strings.Contains(out.String(), "HOST") || !strings.HasSuffix(out.String(), "1000\n") {
				t.Fatalf("exit %+v stdout %q stderr %q", exit, out.String(), errOut.String())
			}
		})
	}
}

// Roots that are no operator's directory are refused.
func TestRootContainmentRefusesBadRoots(t *testing.T) {
	dir := t.TempDir()
	root := minimalRoot(t)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ root, want string }{
		{"relative/root", "clean absolute path"},
		{root + "/../root", "clean absolute path"},
		{link, "not a symlink"},
		{file, "must be a directory"},
		{filepath.Join(dir, "missing"), "must be a directory"},
		{other, "not by the operator"},
	} {
		_, err := Start(context.Background(), Spec{Root: c.root, Argv: []string{"/bin/sh", "-c", "true"}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("root %s: %v, want an error with %q", c.root, err, c.want)
		}
	}
}

// A command jail in a root runs the root's sh, ls and cat, resolved in
// the root, and nothing else of it (its python3 is there, not placed).
func TestRootContainmentCommandJail(t *testing.T) {
	root := minimalRoot(t)
	p, err := ResolveProgramsIn(root, []string{"sh", "ls", "cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Missing) != 0 || p.Root != root || p.Names["sh"] != "/usr/bin/sh" {
		t.Fatalf("programs: %+v", p)
	}
	for _, f := range append(slices.Clone(p.Exec), p.Files...) {
		if strings.HasPrefix(f, root) {
			t.Fatalf("%s: a host path, not the sandbox's", f)
		}
	}
	exit, out, errOut := startAndWait(t, Spec{Root: root, Programs: p, Argv: []string{"/bin/sh", "-c",
		"ls /usr/bin; cat /etc/hostname; /usr/bin/python3 -c 1 && echo RAN-PYTHON; /usr/bin/id && echo RAN-ID; echo end"}})
	// sh is the root's link to dash, as on Debian: the link and its file.
	if exit.ExitCode != 0 || out != "cat\ndash\nls\nsh\nsandbox\nend\n" {
		t.Fatalf("exit %+v stdout %q stderr %q", exit, out, errOut)
	}
	// Programs of one root in a sandbox of another (or of the host) are refused.
	if _, err := Start(context.Background(), Spec{Programs: p, Argv: []string{"/bin/sh"}}); err == nil || !strings.Contains(err.Error(), "resolved in root") {
		t.Fatalf("programs of a root on the host's: %v", err)
	}
}

// ResolveProgramsIn never leaves the root: absolute and climbing symlinks
// resolve inside it, loops are refused.
func TestRootResolveProgramsStaysInTheRoot(t *testing.T) {
	root := minimalRoot(t)
	bin := filepath.Join(root, "usr/bin")
	for name, target := range map[string]string{"perl": "/usr/bin/perl", "up": "../../../../../../../usr/bin/perl", "loop1": "loop2", "loop2": "loop1"} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := ResolveProgramsIn(root, []string{"perl", "up", "cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Missing, []string{"perl", "up"}) || p.Names["cat"] != "/usr/bin/cat" {
		t.Fatalf("host programs found through the root's links: %+v", p)
	}
	if _, err := ResolveProgramsIn(root, []string{"sh"}, []string{"/usr/bin/loop1"}); err == nil {
		t.Fatal("a symlink loop was accepted")
	}
	host, err := ResolvePrograms([]string{"sh"}, nil)
	if err != nil || host.Root != "" || host.Names["sh"] != "/usr/bin/sh" {
		t.Fatalf("host programs: %+v %v", host, err)
	}
}

// waitForProgram returns the host pid of the process of uid named comm.
func waitForProgram(t *testing.T, uid int, comm string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, pid := range uidProcesses(uid) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			if strings.TrimSpace(string(b)) == comm {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s process of uid %d", comm, uid)
	return 0
}

// rootMountPoints are the sandbox paths a root's mounts may be at.
func rootMountPoints() map[string]bool {
	m := map[string]bool{}
	for _, rp := range rootPaths(nil) {
		m[rp.path] = true
	}
	return m
}

// checkRootMounts reads the mounts of pid from the host: every mount at a
// system path comes from beneath root, ro, nosuid and nodev, and at least
// one does.
func checkRootMounts(t *testing.T, pid int, root string, extra ...string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	points := rootMountPoints()
	for _, p := range extra {
		points[p] = true
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("mountinfo line %q", line)
		}
		src, point, opts := f[3], f[4], strings.Split(f[5], ",")
		under := func(p string) bool { return p == point || strings.HasPrefix(point, p+"/") }
		system := false
		for p := range points {
			system = system || under(p)
		}
		if !system {
			continue
		}
		seen++
		if src != root && !strings.HasPrefix(src, root+"/") {
			t.Errorf("mount %s comes from %s, outside the root %s", point, src, root)
		}
		for _, o := range []string{"ro", "nosuid", "nodev"} {
			if !slices.Contains(opts, o) {
				t.Errorf("mount %s (%s) is not %s: %v", point, src, o, opts)
			}
		}
	}
	if seen == 0 {
		t.Errorf("no mount of the root at all:\n%s", b)
	}
}

// checkUnprivileged reads pid's status from the host: all its uids are the
// sandbox's, no_new_privs, a seccomp filter, no capability.
func checkUnprivileged(t *testing.T, pid, uid int) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	u := strconv.Itoa(uid)
	want := map[string]string{"Uid": u + "\t" + u + "\t" + u + "\t" + u, "NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000"}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if w, ok := want[k]; ok {
			if got := strings.TrimSpace(v); got != w {
				t.Errorf("%s of the program: %q, want %q", k, got, w)
			}
			delete(want, k)
		}
	}
	if len(want) != 0 {
		t.Errorf("status lacks %v", want)
	}
}

// A script among the programs runs when its interpreter is one of them
// (which, like many small tools, is a /bin/sh script); one whose
// interpreter is not allowed is refused, naming it: placing that
// interpreter would let anything run it.
func TestRootCommandJailRunsScriptsOfAllowedInterpreters(t *testing.T) {
	root := minimalRoot(t)
	for name, body := range map[string]string{
		"hello":   "#! /bin/sh\necho hello from a script \"$@\"\n",
		"perlish": "#!/usr/bin/perl -w\nprint 1;\n",
		"noabs":   "#!perl\n",
	} {
		if err := os.WriteFile(filepath.Join(root, "usr/bin", name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p, err := ResolveProgramsIn(root, []string{"hello", "sh"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	exit, out, errOut := startAndWait(t, Spec{Root: root, Programs: p, Argv: []string{"/bin/sh", "-c", "hello there; echo end"}})
	if exit.ExitCode != 0 || out != "hello from a script there\nend\n" {
		t.Fatalf("exit %+v stdout %q stderr %q", exit, out, errOut)
	}
	for names, want := range map[string]string{
		"hello":      "run by /bin/sh, which is not among the allowed programs",
		"sh perlish": "run by /usr/bin/perl, which is not there",
		"sh noabs":   "without an absolute interpreter",
	} {
		if _, err := ResolveProgramsIn(root, strings.Fields(names), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", names, err, want)
		}
	}
}
