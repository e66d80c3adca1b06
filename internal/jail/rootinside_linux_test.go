package jail

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/codecage/codecage/internal/debfixture"
)

// startRootInside starts a machine with root inside on a block of ids of
// its own, with dir (made writable for it) as its workspace.
func startRootInside(t *testing.T, dir string) (*Sandbox, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("root inside needs the tests to run as root (scripts/test.sh does)")
	}
	first, err := ReserveUIDs(MachineIDs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ReleaseUIDs(first, MachineIDs) })
	root := t.TempDir()
	for _, d := range []string{dir, root} {
		if err := os.Chown(d, first+SandboxUID, first+SandboxUID); err != nil {
			t.Fatal(err)
		}
	}
	sb := startMachine(t, Spec{Workspace: dir, MachineRoot: root, HostUID: first + SandboxUID, RootInside: true})
	return sb, first
}

// spawnAs runs a shell command in the machine, as root inside or not.
func spawnAs(t *testing.T, sb *Sandbox, root bool, script string) (ProcExit, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: WorkspaceDir, Stdout: &out, Stderr: &errOut, Root: root})
	if err != nil {
		t.Fatalf("Spawn %q: %v", script, err)
	}
	return p.Wait(), out.String(), errOut.String()
}

// hostStatus reads fields of a host process's status: Uid, Gid, CapEff...
func hostStatus(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// Root inside a machine is uid 0 of the machine's own user namespace: on
// the host it is the first id of the machine's block, in a user namespace
// not the host's, with no_new_privs and seccomp; it changes owners within
// its block, and reads nothing the host's root owns.
func TestMachineRootInsideGainsNothingOnTheHost(t *testing.T) {
	dir := t.TempDir()
	// What the host's root keeps in the workspace: root inside may not
	// read it, write it or take it, whatever its capabilities there.
	if err := os.WriteFile(filepath.Join(dir, "host-secret"), []byte("canary-8d1f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "host-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	sb, first := startRootInside(t, dir)

	exit, out, errOut := spawnAs(t, sb, false, "id -u; id -g; id -G")
	if exit.ExitCode != 0 || out != "1000\n1000\n1000\n" {
		t.Fatalf("the user: exit %+v out %q err %q", exit, out, errOut)
	}
	exit, out, errOut = spawnAs(t, sb, true, `id -u; id -g; id -G
touch mine && chown 1001:1002 mine && stat -c %u:%g mine
mkdir -p /srv/app && chown 1000 /srv/app && stat -c %u /srv/app
cat host-secret; echo read $?
echo x > host-secret; echo write $?
ls host-dir; echo list $?
chown 0 host-secret; echo chown $?`)
	if exit.ExitCode != 0 || !strings.HasPrefix(out, "0\n0\n0\n1001:1002\n1000\n") {
		t.Fatalf("root inside: exit %+v out %q err %q", exit, out, errOut)
	}
	for _, op := range []string{"read", "write", "list", "chown"} {
		if !strings.Contains(out, "\n"+op+" ") || strings.Contains(out, "\n"+op+" 0\n") {
			t.Errorf("root inside could %s the host's file: %q (err %q)", op, out, errOut)
		}
	}
	if strings.Contains(out, "canary") {
		t.Errorf("root inside read the host's file: %q", out)
	}
	// The host sees the block's ids, never its own root's.
	fi, err := os.Stat(filepath.Join(dir, "mine"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != first+1001 || int(st.Gid) != first+1002 {
		t.Errorf("chown 1001:1002 inside is %d:%d on the host, want %d:%d", st.Uid, st.Gid, first+1001, first+1002)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "host-secret")); err != nil || string(b) != "canary-8d1f" {
		t.Errorf("the host's file after root inside tried it: %q %v", b, err)
	}

	// A process left running as root inside, judged from the host.
	p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/sleep", "60"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: WorkspaceDir, Root: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Signal(9)
	var pid string
	waitFor(t, "root's sleep on the host", func() bool {
		ps := hostProcessesOf(first)
		for _, e := range ps {
			if n, name, _ := strings.Cut(e, ":"); name == "sleep" {
				pid = n
			}
		}
		return pid != ""
	})
	st := hostStatus(t, pid)
	if f := strings.Fields(st["Uid"]); len(f) != 4 || f[0] != strconv.Itoa(first) || f[1] != strconv.Itoa(first) {
		t.Errorf("root inside runs as %q on the host, want %d", st["Uid"], first)
	}
	if st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
		t.Errorf("root inside: NoNewPrivs %q Seccomp %q", st["NoNewPrivs"], st["Seccomp"])
	}
	// Its capabilities are rootCaps, and they hold in its own user
	// namespace only: that namespace is not the host's.
	var want uint64
	for _, c := range rootCaps {
		want |= 1 << c
	}
	if got, _ := strconv.ParseUint(st["CapEff"], 16, 64); got != want {
		t.Errorf("CapEff %s, want %x", st["CapEff"], want)
	}
	if st["CapAmb"] != "0000000000000000" || st["CapInh"] != "0000000000000000" {
		t.Errorf("ambient %s inheritable %s", st["CapAmb"], st["CapInh"])
	}
	hostNS, _ := os.Readlink("/proc/self/ns/user")
	if ns, _ := os.Readlink("/proc/" + pid + "/ns/user"); ns == "" || ns == hostNS {
		t.Errorf("root inside is in user namespace %q, the host's is %q", ns, hostNS)
	}
	if groups := st["Groups"]; groups != "" {
		t.Errorf("root inside has supplementary groups %q", groups)
	}
}

// A set-user-ID program root inside makes does not raise the user: the
// kernel runs it as the user (no_new_privs, nosuid), as the host sees.
func TestMachineRootInsideSetUIDDoesNotRaise(t *testing.T) {
	sb, first := startRootInside(t, t.TempDir())
	exit, out, errOut := spawnAs(t, sb, true, "cp /bin/sleep ./rootsleep && chmod 4755 ./rootsleep && stat -c %u:%a rootsleep")
	if exit.ExitCode != 0 || out != "0:4755\n" {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	p, err := sb.Spawn(ProcSpec{Argv: []string{WorkspaceDir + "/rootsleep", "60"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: WorkspaceDir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Signal(9)
	var pid string
	waitFor(t, "the user's rootsleep on the host", func() bool {
		for _, e := range hostProcessesOf(first + SandboxUID) {
			if n, name, _ := strings.Cut(e, ":"); name == "rootsleep" {
				pid = n
			}
		}
		return pid != ""
	})
	st := hostStatus(t, pid)
	user := strconv.Itoa(first + SandboxUID)
	if st["Uid"] != strings.Repeat(user+"\t", 3)+user || st["CapEff"] != "0000000000000000" {
		t.Errorf("the set-user-ID program runs as %q with CapEff %s, want the user %s with none", st["Uid"], st["CapEff"], user)
	}
}

// A machine without root inside refuses a process as root.
func TestMachineWithoutRootInsideRefusesRoot(t *testing.T) {
	sb := startMachine(t, Spec{})
	if _, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/true"}, Dir: WorkspaceDir, Root: true}); err == nil || !strings.Contains(err.Error(), "no root inside") {
		t.Fatalf("Spawn as root: %v", err)
	}
}

// sudo in a machine with root inside runs the command as root inside,
// in the caller's directory, on the caller's stdin, stdout and stderr,
// with its exit status; the caller's signals reach it. Judged from the
// host too: the process runs as the block's first id.
func TestMachineSudo(t *testing.T) {
	sb, first := startRootInside(t, t.TempDir())
	sudo := func(script string) (ProcExit, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=" + filepath.Dir(SudoPath) + ":/usr/bin:/bin", "USER=user"},
			Dir: WorkspaceDir, Stdout: &out, Stderr: &errOut})
		if err != nil {
			t.Fatalf("Spawn %q: %v", script, err)
		}
		return p.Wait(), out.String(), errOut.String()
	}
	exit, out, errOut := sudo("sudo id -u; sudo -u root pwd; echo fed | sudo cat; sudo sh -c 'echo $HOME $USER $SUDO_USER'; sudo -u \"$(id -un)\" id -u; sudo -n -E id -g")
	want := "0\n" + WorkspaceDir + "\nfed\n/root root user\n1000\n0\n"
	if exit.ExitCode != 0 || out != want {
		t.Fatalf("sudo: exit %+v out %q want %q err %q", exit, out, want, errOut)
	}
	exit, _, errOut = sudo("sudo sh -c 'exit 7'")
	if exit.ExitCode != 7 {
		t.Errorf("sudo sh -c 'exit 7': exit %+v err %q", exit, errOut)
	}
	exit, _, errOut = sudo("sudo no-such-program-here")
	if exit.ExitCode == 0 || !strings.Contains(errOut, "command not found") {
		t.Errorf("sudo of a missing program: exit %+v err %q", exit, errOut)
	}

	// A signal to sudo reaches its root process.
	p, err := sb.Spawn(ProcSpec{Argv: []string{filepath.Dir(SudoPath) + "/sudo", "/bin/sleep", "5656"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: WorkspaceDir})
	if err != nil {
		t.Fatal(err)
	}
	var pid string
	waitFor(t, "sudo's sleep on the host", func() bool {
		for _, e := range hostProcessesOf(first) {
			if n, name, _ := strings.Cut(e, ":"); name == "sleep" {
				pid = n
			}
		}
		return pid != ""
	})
	if st := hostStatus(t, pid); st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" {
		t.Errorf("sudo's process: NoNewPrivs %q Seccomp %q", st["NoNewPrivs"], st["Seccomp"])
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if e := p.Wait(); e.ExitCode != 128+int(syscall.SIGTERM) {
		t.Errorf("sudo after SIGTERM: %+v, want exit %d", e, 128+int(syscall.SIGTERM))
	}
	waitFor(t, "sudo's sleep to end", func() bool {
		_, err := os.Stat("/proc/" + pid)
		return err != nil
	})
}

// The sudo script talks to the socket the init listens on.
func TestSudoScriptNamesTheSocket(t *testing.T) {
	if !strings.Contains(sudoScript, `SOCKET = "`+SudoSocket+`"`) {
		t.Fatalf("sudo.py does not name %s", SudoSocket)
	}
}

// hostFileUnder is a regular file below dir on the host, to depth 3.
func hostFileUnder(t *testing.T, dir string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || found != "" {
			return filepath.SkipDir
		}
		if d.IsDir() && strings.Count(strings.TrimPrefix(p, dir), "/") >= 3 {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatalf("the host's %s holds no file to try (this kind of machine keeps Go there)", dir)
	}
	return found
}

// A machine with root inside and a root of its own has a writable /usr
// for root, as a computer has: what root puts there or changes there
// lands in the machine's own root, stays across a restart, and is nosuid;
// the host's files show as root inside's. The user cannot write there,
// and nobody changes the host's files, as the host sees.
// rootInsideSpec is a machine with root inside on a block of ids of its
// own, with a workspace and a root of its own; first is the block's.
func rootInsideSpec(t *testing.T) (spec Spec, first int) {
	t.Helper()
	first, err := ReserveUIDs(MachineIDs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ReleaseUIDs(first, MachineIDs) })
	ws, root := t.TempDir(), t.TempDir()
	for _, d := range []string{ws, root} {
		if err := os.Chown(d, first+SandboxUID, first+SandboxUID); err != nil {
			t.Fatal(err)
		}
	}
	return Spec{Workspace: ws, MachineRoot: root, HostUID: first + SandboxUID, RootInside: true}, first
}

// mountAt is the line of the last mount at dir (the one on top) in the
// mount table of the sandbox's init.
func mountAt(sb *Sandbox, dir string) string {
	mounts, _ := os.ReadFile("/proc/" + strconv.Itoa(sb.cmd.Process.Pid) + "/mountinfo")
	last := ""
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			last = l
		}
	}
	return last
}

func TestMachineUsrIsRootsToWrite(t *testing.T) {
	spec, first := rootInsideSpec(t)
	root := spec.MachineRoot
	changed, removed := hostFileUnder(t, "/usr/local"), hostFileUnder(t, "/usr/share/doc")
	changedBefore, err := os.ReadFile(changed)
	if err != nil {
		t.Fatal(err)
	}
	sb := startMachine(t, spec)
	exit, out, errOut := spawnAs(t, sb, true, `printf '#!/bin/sh\necho mine\n' > /usr/local/bin/cage-tool && chmod 4755 /usr/local/bin/cage-tool &&
mkdir -p /usr/local/lib/cage-pkg && cp /usr/local/bin/cage-tool /usr/bin/cage-sys-tool &&
stat -c %U /usr/bin /usr/bin/ls /usr/local/bin/cage-tool && echo changed >> `+changed+` && rm `+removed+` && echo done`)
	if exit.ExitCode != 0 || out != "root\nroot\nroot\ndone\n" {
		t.Fatalf("root in /usr: exit %+v out %q err %q", exit, out, errOut)
	}
	exit, out, errOut = spawnAs(t, sb, false, "/usr/local/bin/cage-tool; echo y > /usr/bin/user-tool; echo user $?; rm -f /usr/bin/cage-sys-tool; echo rm $?")
	if out != "mine\nuser 2\nrm 1\n" {
		t.Fatalf("the user and /usr: exit %+v out %q err %q", exit, out, errOut)
	}
	// Judged from the host: the tools are in the machine's root, root
	// inside's, not set-user-ID in effect; the host's /usr is as it was.
	for _, p := range []string{"usr/.upper/local/bin/cage-tool", "usr/.upper/bin/cage-sys-tool"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatalf("the machine's root on the host: %v", err)
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != first {
			t.Errorf("%s is %d's on the host, want root inside's %d", p, uid, first)
		}
	}
	for _, p := range []string{"/usr/local/bin/cage-tool", "/usr/bin/cage-sys-tool"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("the host has %s: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(changed); !bytes.Equal(b, changedBefore) {
		t.Fatalf("the host's %s changed", changed)
	}
	if _, err := os.Lstat(removed); err != nil {
		t.Fatalf("the host's %s: %v", removed, err)
	}
	if usr := mountAt(sb, "/usr"); !strings.Contains(usr, " - overlay ") || !strings.Contains(usr, "nosuid") {
		t.Errorf("/usr is not a nosuid overlay: %q", usr)
	}
	sb.Kill(LimitNone)
	sb.Wait()

	again := startMachine(t, spec)
	exit, out, errOut = spawnAs(t, again, false, "/usr/local/bin/cage-tool && /usr/bin/cage-sys-tool && test -d /usr/local/lib/cage-pkg && tail -n1 "+changed+" && test ! -e "+removed+" && echo kept")
	if out != "mine\nmine\nchanged\nkept\n" {
		t.Fatalf("after a restart: exit %+v out %q err %q", exit, out, errOut)
	}
}

// Root inside needs a root of its own (sudo and /usr/local live there):
// a machine on a read-only tmpfs / with root inside is refused, saying so.
func TestMachineRootInsideNeedsItsOwnRoot(t *testing.T) {
	first, err := ReserveUIDs(MachineIDs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ReleaseUIDs(first, MachineIDs) })
	_, err = Start(context.Background(), Spec{Argv: []string{"/bin/true"}, Machine: true, HostUID: first + SandboxUID, RootInside: true})
	if err == nil || !strings.Contains(err.Error(), "a root of its own") {
		t.Fatalf("root inside on a tmpfs root: %v", err)
	}
}

// Root inside installs Debian packages with dpkg and with apt-get, as on
// a computer: their programs land in the machine's /usr (its own root, on
// the host) and run for the user, and the host's /usr and package
// database never change. The machine's package database starts empty
// (its own /var).
func TestMachineRootInstallsDebianPackages(t *testing.T) {
	ws := t.TempDir()
	for _, name := range []string{"cage-hello", "cage-apt"} {
		if _, err := debfixture.Package(ws, name); err != nil {
			t.Fatal(err)
		}
	}
	// Its dependencies are the system's: apt finds them in the machine's
	// database, which starts as the host's (no repository is reachable).
	if _, err := debfixture.Package(ws, "cage-needs", "bash (>= 4)", "coreutils"); err != nil {
		t.Fatal(err)
	}
	hostStatus, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		t.Fatal(err)
	}
	sb, first := startRootInside(t, ws)
	exit, out, errOut := spawnAs(t, sb, true, "export PATH=/usr/sbin:/usr/bin:/sbin:/bin; dpkg-query -W -f '${Status}\n' bash && dpkg -i /workspace/cage-hello.deb >/dev/null && "+
		"apt-get install -y -q /workspace/cage-apt.deb /workspace/cage-needs.deb >/dev/null && dpkg-query -W -f '${Package} ${Status}\n' cage-hello cage-apt cage-needs")
	if exit.ExitCode != 0 || out != "install ok installed\ncage-apt install ok installed\ncage-hello install ok installed\ncage-needs install ok installed\n" {
		t.Fatalf("dpkg -i and apt-get install as root: exit %+v out %q err %q", exit, out, errOut)
	}
	// Judged from the host: the machine's database, in its root, holds
	// the host's packages and its own.
	machineStatus, err := os.ReadFile(filepath.Join(sb.spec.MachineRoot, "var/lib/dpkg/status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"bash", "coreutils", "cage-hello", "cage-apt", "cage-needs"} {
		if !bytes.Contains(machineStatus, []byte("\nPackage: "+pkg+"\n")) && !bytes.HasPrefix(machineStatus, []byte("Package: "+pkg+"\n")) {
			t.Errorf("the machine's package database has no %s", pkg)
		}
	}
	if exit, out, errOut = spawnAs(t, sb, false, "cage-hello; cage-apt; stat -c %U /usr/bin/cage-hello"); out != "hello from cage-hello\nhello from cage-apt\nroot\n" {
		t.Fatalf("the packages' programs for the user: exit %+v out %q err %q", exit, out, errOut)
	}
	// Judged from the host: the programs are in the machine's root, root
	// inside's; the host has neither them nor a word of them in its
	// database.
	for _, name := range []string{"cage-hello", "cage-apt"} {
		fi, err := os.Lstat(filepath.Join(sb.spec.MachineRoot, "usr/.upper/bin", name))
		if err != nil {
			t.Fatalf("the machine's root on the host: %v", err)
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != first {
			t.Errorf("%s is %d's on the host, want root inside's %d", name, uid, first)
		}
		if _, err := os.Lstat("/usr/bin/" + name); !os.IsNotExist(err) {
			t.Fatalf("the host has /usr/bin/%s: %v", name, err)
		}
	}
	if now, _ := os.ReadFile("/var/lib/dpkg/status"); !bytes.Equal(now, hostStatus) {
		t.Fatal("the host's package database changed")
	}
}

// What others may not read in the host's /usr, root inside may not read
// in its machine either, though the idmapped /usr shows the host's root
// as root inside: each such entry is hidden there (a file of the host's
// root with mode 0600, a directory of the host's root with mode 0700).
// Judged by planting them in the host's /usr.
func TestMachineUsrHidesWhatOthersMayNotRead(t *testing.T) {
	tok := strconv.Itoa(os.Getpid())
	file, dir := "/usr/share/codecage-secret-"+tok, "/usr/share/codecage-private-"+tok
	t.Cleanup(func() {
		os.Remove(file)
		os.RemoveAll(dir)
		usrHidden = sync.OnceValues(func() ([]string, error) { return scanHidden("/usr", maxUsrEntries, maxUsrHidden) })
	})
	if err := os.WriteFile(file, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/inside", []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A fresh scan, as a new server's first machine makes.
	usrHidden = sync.OnceValues(func() ([]string, error) { return scanHidden("/usr", maxUsrEntries, maxUsrHidden) })
	sb, _ := startRootInside(t, t.TempDir())
	script := "cat " + file + " " + dir + "/inside 2>&1; ls /usr/share | grep -c codecage-; stat -c %U /usr/share; echo mine > " + file + " && cat " + file
	exit, out, errOut := spawnAs(t, sb, true, script)
	want := "cat: " + file + ": No such file or directory\ncat: " + dir + "/inside: No such file or directory\n0\nroot\nmine\n"
	if out != want {
		t.Fatalf("root inside and the host's unreadable entries: exit %+v out %q err %q, want %q", exit, out, errOut, want)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "host secret\n" {
		t.Fatalf("the host's %s: %q %v", file, b, err)
	}
}

// scanHidden lists what others may not read, and not what lies below a
// hidden directory; it never follows a link.
func TestScanHidden(t *testing.T) {
	dir := t.TempDir()
	for p, mode := range map[string]os.FileMode{"open": 0o644, "secret": 0o600, "exec-only": 0o711, "sub/deep-secret": 0o640} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "closed/inner"), 0o755)
	os.Chmod(filepath.Join(dir, "closed"), 0o750)
	os.Symlink("/etc/shadow", filepath.Join(dir, "link"))
	got, err := scanHidden(dir, 100, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"closed", "exec-only", "secret", "sub/deep-secret"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("hidden %q, want %q", got, want)
	}
	if _, err := scanHidden(dir, 100, 2); err == nil {
		t.Fatal("more hidden entries than the bound: no error")
	}
	if _, err := scanHidden(dir, 3, 10); err == nil {
		t.Fatal("more entries than the bound: no error")
	}
}

// The package managers' state is made in the machine's root, never
// through a link the code left there: with its /var a link to a host
// directory, the host directory stays empty, and the machine starts.
func TestMachinePackageStateFollowsNoLink(t *testing.T) {
	first, err := ReserveUIDs(MachineIDs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ReleaseUIDs(first, MachineIDs) })
	ws, root, host := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{ws, root} {
		if err := os.Chown(d, first+SandboxUID, first+SandboxUID); err != nil {
			t.Fatal(err)
		}
	}
	// Root inside's on the host, as a place it could write would be.
	if err := os.Chown(host, first, first); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "var")); err != nil {
		t.Fatal(err)
	}
	sb := startMachine(t, Spec{Workspace: ws, MachineRoot: root, HostUID: first + SandboxUID, RootInside: true})
	if exit, out, errOut := spawnAs(t, sb, true, "echo up"); out != "up\n" {
		t.Fatalf("the machine: exit %+v out %q err %q", exit, out, errOut)
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("the host directory the link led to got %d entries", len(entries))
	}
}
