package service_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/service"
)

// rootCommand runs a command line as root inside a machine session and
// returns its result (a failed command is not an error here).
func rootCommand(t *testing.T, svc *service.Service, id, line string) *service.CommandResult {
	t.Helper()
	res, err := svc.RunCommand(context.Background(), service.CommandRequest{SessionID: id, Owner: "o", User: "root", Command: line})
	if err != nil {
		t.Fatalf("as root: %q: %v", line, err)
	}
	return res
}

// newMachineHome starts a machine session and returns its id and home.
func newMachineHome(t *testing.T, svc *service.Service) (string, string) {
	t.Helper()
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true})
	if err != nil {
		t.Fatal(err)
	}
	return se.ID, se.Home
}

// machineWorkspace is a machine session's workspace on the host, found by
// a file the test writes there.
func machineWorkspace(t *testing.T, svc *service.Service, stateDir, id string) string {
	t.Helper()
	mark := "mark-" + randomToken(t)
	if _, err := svc.WriteFile(context.Background(), id, "o", mark, []byte("x")); err != nil {
		t.Fatal(err)
	}
	found, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*", mark))
	if len(found) != 1 {
		t.Fatalf("the machine's workspace: %v", found)
	}
	return filepath.Dir(found[0])
}

// Root inside a machine session is uid 0 of the session's own user
// namespace and nothing more: on the host its processes run as the first
// id of the session's block, in a user namespace that is not the host's,
// with no_new_privs, seccomp and only the capabilities root inside has
// there; what the host's root owns (a 0600 file and a 0700 directory
// the host left in the workspace) it can neither read, write, list nor
// take. Judged from the host.
func TestContainment_52_RootInsideGainsNothingOnTheHost(t *testing.T) {
	svc, cfg := machineService(t)
	id, home := newMachineHome(t, svc)
	ws := machineWorkspace(t, svc, cfg.StateDir, id)
	secret := "canary-" + randomToken(t)
	if err := os.WriteFile(filepath.Join(ws, "host-secret"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "host-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Each try in Python (an image's root may lack chmod): the errno it
	// got, 13 (EACCES) or 1 (EPERM), or "done".
	res := rootCommand(t, svc, id, "cd "+home+` && id -u && python3 -c '
import os
tries = {"read": lambda: print(open("host-secret").read()), "write": lambda: open("host-secret", "a").write("x"),
         "list": lambda: os.listdir("host-dir"), "chown": lambda: os.chown("host-secret", 0, 0),
         "chmod": lambda: os.chmod("host-secret", 0o666), "enter": lambda: os.chdir("host-dir")}
for name, f in tries.items():
    try:
        f(); print(name, "done")
    except OSError as e:
        print(name, e.errno)
' && (sleep 5252 >/dev/null 2>&1 &)`)
	if !strings.HasPrefix(res.Stdout, "0\n") {
		t.Fatalf("not root inside: %q %q", res.Stdout, res.Stderr)
	}
	// gVisor's kernel answers a chown, chmod or chdir from what it cached
	// (root's capabilities pass its own check) and says done where the
	// host refused the change: judged by the host's files below.
	for _, op := range either([]string{"read", "write", "list", "chown", "chmod", "enter"}, []string{"read", "write", "list"}) {
		if !strings.Contains(res.Stdout, "\n"+op+" 13\n") && !strings.Contains(res.Stdout, "\n"+op+" 1\n") {
			t.Errorf("root inside could %s what the host's root owns (or failed otherwise): %q (stderr %q)", op, res.Stdout, res.Stderr)
		}
	}
	if strings.Contains(res.Stdout, secret) {
		t.Fatalf("root inside read the host's file: %q", res.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "host-secret")); err != nil || string(b) != secret {
		t.Fatalf("the host's file after root inside: %q %v", b, err)
	}
	for name, mode := range map[string]os.FileMode{"host-secret": 0o600, "host-dir": 0o700} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ws, name), &st); err != nil || os.FileMode(st.Mode).Perm() != mode || st.Uid != 0 || st.Gid != 0 {
			t.Fatalf("the host's %s is now mode %o, owner %d:%d (%v); want %o, 0:0", name, st.Mode&0o7777, st.Uid, st.Gid, err, mode)
		}
	}

	// The same root, reached through sudo from the user's command.
	machineCommand(t, svc, id, "sudo sleep 5253 >/dev/null 2>&1 &", 0)
	first := workspaceUIDOf(t, ws) - 1000
	if first < 1_000_000 {
		t.Errorf("the block starts at %d: among the host's accounts", first)
	}
	if onGVisor() {
		// Root's processes are gVisor's kernel's; the host's processes
		// of the sandbox (its Sentry and gofer) are the block's.
		checkBlockProcesses(t, first)
	} else {
		for _, mark := range []string{"5252", "5253"} {
			checkRootInside(t, waitForProcess(t, "sleep", mark), first)
		}
	}
	if err := svc.CloseSession(context.Background(), id, "o"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "root's processes to end with their session", func() bool {
		return hostProcessNamed("sleep", "5252") == nil && hostProcessNamed("sleep", "5253") == nil && !blockRuns(first)
	})
	assertNoLeftovers(t)
}

// checkRootInside judges a process of root inside from the host: the
// block's first id, no_new_privs, seccomp, no group, root inside's
// capabilities alone, a user namespace not the host's.
func checkRootInside(t *testing.T, pid, first int) {
	t.Helper()
	st := hostStatus(t, pid)
	if want := strings.Repeat(strconv.Itoa(first)+" ", 3) + strconv.Itoa(first); st["Uid"] != want || st["Gid"] != want {
		t.Errorf("root inside runs as Uid %q Gid %q on the host, want the block's first id %d", st["Uid"], st["Gid"], first)
	}
	if st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" || st["Groups"] != "" || st["CapAmb"] != "0000000000000000" {
		t.Errorf("root inside: NoNewPrivs %q Seccomp %q Groups %q CapAmb %q", st["NoNewPrivs"], st["Seccomp"], st["Groups"], st["CapAmb"])
	}
	// Its capabilities: changing owners and modes, passing modes, its
	// ids, signals and low ports, nothing else (no SYS_ADMIN, no
	// NET_ADMIN, no ptrace, no mknod, no raw sockets).
	const rootCaps = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<10
	if eff, _ := strconv.ParseUint(st["CapEff"], 16, 64); eff != rootCaps {
		t.Errorf("root inside has CapEff %s, want %x", st["CapEff"], uint64(rootCaps))
	}
	if bnd, _ := strconv.ParseUint(st["CapBnd"], 16, 64); bnd != rootCaps {
		t.Errorf("root inside has CapBnd %s, want %x", st["CapBnd"], uint64(rootCaps))
	}
	hostNS, _ := os.Readlink("/proc/self/ns/user")
	if ns, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/user"); ns == "" || ns == hostNS {
		t.Errorf("root inside is in user namespace %q; the host's is %q", ns, hostNS)
	}
}

// A set-user-ID root program that root inside makes in the machine's
// workspace raises no one: the user who starts it runs it as the user,
// with no capability (no_new_privs, nosuid), as the host sees.
func TestContainment_53_SetUIDByRootInsideRaisesNoOne(t *testing.T) {
	svc, cfg := machineService(t)
	id, home := newMachineHome(t, svc)
	ws := machineWorkspace(t, svc, cfg.StateDir, id)
	// In Python: an image's root may have no chmod or stat.
	res := rootCommand(t, svc, id, `python3 -c '
import os, shutil, sys
for p in sys.argv[1:]:
    shutil.copy("/bin/sleep", p); os.chmod(p, 0o4755); st = os.stat(p)
    print("%d:%o" % (st.st_uid, st.st_mode & 0o7777))
' /tmp/rootsleep `+home+"/rootsleep")
	if res.Stdout != "0:4755\n0:4755\n" {
		t.Fatalf("root's set-user-ID program: %q %q", res.Stdout, res.Stderr)
	}
	machineCommand(t, svc, id, "/tmp/rootsleep 5353 >/dev/null 2>&1 & ./rootsleep 5354 >/dev/null 2>&1 &", 0)
	user := strconv.Itoa(workspaceUIDOf(t, ws))
	if onGVisor() {
		// On the host the program is the block's first id's, on a nosuid
		// mount, and the sandbox's processes are the block's; in gVisor's
		// kernel the user runs it as the user.
		first := workspaceUIDOf(t, ws) - 1000
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(ws, "rootsleep"), &st); err != nil || int(st.Uid) != first {
			t.Errorf("root's program on the host: %v, owner %d, want %d", err, st.Uid, first)
		}
		checkBlockProcesses(t, first)
		ps := machineCommand(t, svc, id, "for i in $(seq 400); do [ $(ps -eo args= | grep -c '[r]ootsleep 535') -ge 2 ] && break; sleep 0.05; done; ps -eo euid=,uid=,args= | grep '[r]ootsleep 535'", time.Minute)
		if len(strings.Fields(ps)) != 8 || strings.Count(" "+strings.Join(strings.Fields(ps), " ")+" ", " 1000 1000 ") != 2 {
			t.Errorf("the set-user-ID programs run as %q; want the user, twice", ps)
		}
		return
	}
	for _, mark := range []string{"5353", "5354"} {
		st := hostStatus(t, waitForProcess(t, "rootsleep", mark))
		if st["Uid"] != strings.Repeat(user+" ", 3)+user || st["CapEff"] != "0000000000000000" || st["CapPrm"] != "0000000000000000" {
			t.Errorf("rootsleep %s runs with Uid %q CapEff %q CapPrm %q; want the user %s, no capability", mark, st["Uid"], st["CapEff"], st["CapPrm"], user)
		}
	}
}

// Root inside writes to a machine's /usr (on an environment's root, its
// /usr/local), which is its to write: what it adds lands in the machine's
// own root, never in the host's /usr; a file of the host's there, changed
// or removed, is changed or removed in this machine alone (the host's is
// as it was); and the mount is nosuid and nodev. Judged from the host.
func TestContainment_54_RootInsideUsrLeavesTheHostsAlone(t *testing.T) {
	svc, _ := machineService(t)
	id := newMachine(t, svc)
	var hostFile string
	_ = filepath.WalkDir("/usr/local", func(p string, d os.DirEntry, err error) error {
		if err != nil || hostFile != "" || d.IsDir() && strings.Count(p, "/") > 4 {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			hostFile = p
		}
		return nil
	})
	if hostFile == "" {
		t.Fatal("the host's /usr/local holds no file to try (this kind of machine keeps Go there)")
	}
	before, err := os.ReadFile(hostFile)
	if err != nil {
		t.Fatal(err)
	}
	// (An environment's /usr/local may have no bin: root makes it. Its
	// root is not the host's either: the host's file is then not there
	// to change, and the try would make a new one, which is root's to do.)
	onHostRoot := os.Getenv(testEnvironmentVar) == ""
	script, want, added := "mkdir -p /usr/local/bin && echo new > /usr/local/bin/cage-5454 && echo added; ", "added\n", []string{"/usr/local/bin/cage-5454"}
	writable := "/usr/local"
	if onHostRoot {
		script += "echo new > /usr/bin/cage-5454 && echo added; echo x >> " + hostFile + "; echo change $?; tail -c 2 " + hostFile +
			"; rm -f " + hostFile + "; test -e " + hostFile + "; echo gone $?; "
		want, added, writable = "added\nadded\nchange 0\nx\ngone 1\n", append(added, "/usr/bin/cage-5454"), "/usr"
	}
	res := rootCommand(t, svc, id, script+"sleep 5454 >/dev/null 2>&1 &")
	if res.Stdout != want {
		t.Fatalf("root inside in %s: %q %q, want %q", writable, res.Stdout, res.Stderr, want)
	}
	if b, err := os.ReadFile(hostFile); err != nil || !bytes.Equal(b, before) {
		t.Fatalf("the host's %s after root inside changed or removed it: %v", hostFile, err)
	}
	if onGVisor() {
		gvisorUsrLeavesTheHostsAlone(t, svc, id, added)
		return
	}
	pid := waitForProcess(t, "sleep", "5454")
	for _, p := range added {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("the host has the machine's %s: %v", p, err)
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/root" + p); err != nil {
			t.Fatalf("%s is not in the machine: %v", p, err)
		}
	}
	mounts, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == writable && strings.Contains(l, " - overlay ") {
			seen = true
			if !strings.Contains(f[5], "nosuid") || !strings.Contains(f[5], "nodev") {
				t.Errorf("%s is mounted %s", writable, f[5])
			}
		}
	}
	if !seen {
		t.Fatalf("no %s overlay in the machine:\n%s", writable, mounts)
	}
}

// gvisorUsrLeavesTheHostsAlone is the end of row 54 under gVisor: what
// root added is in the machine (the overlay's upper layer, in the
// session's root) and not in the host's /usr, and the bundle's /usr on
// the host is the machine's overlay over the host's /usr bound
// read-only, all of it nosuid and nodev.
func gvisorUsrLeavesTheHostsAlone(t *testing.T, svc *service.Service, id string, added []string) {
	t.Helper()
	for _, p := range added {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("the host has the machine's %s: %v", p, err)
		}
		machineCommand(t, svc, id, "test -f "+p, time.Minute)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// The bundle's /usr: the host's, read-only (idmapped), under the
	// machine's overlay; neither lets a set-user-ID file or a device act.
	lower, overlay := 0, 0
	for _, l := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasSuffix(f[4], "/rootfs/usr") {
			continue
		}
		opts := strings.Split(f[5], ",")
		for _, opt := range []string{"nosuid", "nodev"} {
			if !slices.Contains(opts, opt) {
				t.Errorf("the bundle's %s is mounted %s, without %s", f[4], f[5], opt)
			}
		}
		if i := slices.Index(f, "-"); i > 0 && i+1 < len(f) && f[i+1] == "overlay" {
			overlay++
			continue
		}
		lower++
		if !slices.Contains(opts, "ro") {
			t.Errorf("the host's /usr under the bundle's %s is mounted %s, not read-only", f[4], f[5])
		}
	}
	if lower == 0 || overlay == 0 {
		t.Fatalf("no machine /usr (the host's, read-only, and an overlay) in a bundle's root:\n%s", mounts)
	}
}

// blockPIDs are the host processes that run as an id of the block from
// first (a gVisor machine's Sentry and gofer).
func blockPIDs(first int) []int {
	var pids []int
	for _, p := range leftovers.HostProcesses() {
		if uid := p.UID(); uid >= first && uid < first+1024 {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

func blockRuns(first int) bool { return len(blockPIDs(first)) > 0 }
