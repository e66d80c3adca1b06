package jail

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// uidHolderEnv makes the test binary a second codecage process: it starts
// one sandbox, prints "uid <host uid>", and holds it until stdin closes.
const uidHolderEnv = "CODECAGE_TEST_UID_HOLDER"

var sleeper = python("import time; time.sleep(120)")

func holdSandbox() int {
	sb, err := Start(context.Background(), Spec{Argv: sleeper})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("uid", sb.HostUID())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	sb.Kill(LimitNone)
	sb.Wait()
	return 0
}

// procUIDs maps each host process descending from root (excluded) that
// runs as a sandbox uid to that uid, read from /proc/<pid>/status.
func procUIDs(root int) map[int]int {
	type proc struct{ ppid, uid int }
	procs := map[int]proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		p := proc{-1, -1}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if f := strings.Fields(v); len(f) > 0 {
				switch k {
				case "PPid":
					p.ppid, _ = strconv.Atoi(f[0])
				case "Uid":
					p.uid, _ = strconv.Atoi(f[0])
				}
			}
		}
		procs[pid] = p
	}
	out := map[int]int{}
	for pid, p := range procs {
		if !InUIDSpan(p.uid) {
			continue
		}
		for q, n := p.ppid, 0; q > 0 && n < 64; q, n = procs[q].ppid, n+1 {
			if q == root {
				out[pid] = p.uid
				break
			}
		}
	}
	return out
}

// Two codecage processes on one host never run sandboxes as one uid, and
// a process that dies (SIGKILL: no cleanup of its own) frees its block.
func TestUIDsAreUniqueAcrossProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root mode only: rootless sandboxes run as the caller's uid")
	}
	mine, err := Start(context.Background(), Spec{Argv: sleeper})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { mine.Kill(LimitNone); mine.Wait(); mine.Channel().Close() }()

	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), uidHolderEnv+"=1")
	stdin, _ := holder.StdinPipe()
	stdout, _ := holder.StdoutPipe()
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = holder.Process.Kill(); _ = holder.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	theirUID, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "uid "))
	if err != nil || theirUID == 0 {
		t.Fatalf("holder said %q (%v)", line, err)
	}

	// From the host: every process of each side's sandbox, and its uid.
	var ours, theirs map[int]int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		ours, theirs = procUIDs(os.Getpid()), procUIDs(holder.Process.Pid)
		for pid := range theirs {
			delete(ours, pid) // the holder is our child: its sandbox descends from us too
		}
		if len(ours) >= 2 && len(theirs) >= 2 { // init and python each
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(ours) == 0 || len(theirs) == 0 {
		t.Fatalf("sandbox processes not found: ours %v, theirs %v", ours, theirs)
	}
	ourUIDs := map[int]bool{}
	for _, uid := range ours {
		ourUIDs[uid] = true
	}
	for pid, uid := range theirs {
		if ourUIDs[uid] {
			t.Errorf("process %d of the other codecage's sandbox runs as uid %d, as ours do (%v)", pid, uid, ours)
		}
		if uid != theirUID {
			t.Errorf("process %d runs as %d, its sandbox's uid is %d", pid, uid, theirUID)
		}
	}
	if !ourUIDs[mine.HostUID()] {
		t.Errorf("our sandbox's processes run as %v, not its uid %d", ours, mine.HostUID())
	}

	// The holder's block stays leased while it lives, and not after.
	size, _ := uidBlocks()
	base := HostUIDBase + (theirUID-HostUIDBase)/size*size
	if base <= mine.HostUID() && mine.HostUID() < base+size {
		t.Fatalf("both processes lease the block from %d", base)
	}
	lockFile := filepath.Join(UIDLeaseDir, strconv.Itoa(base)+".lock")
	tryLock := func() error {
		f, err := os.OpenFile(lockFile, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err := tryLock(); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("the holder's block %s is not locked while it lives: %v", lockFile, err)
	}
	_ = holder.Process.Signal(syscall.SIGKILL)
	_ = holder.Wait()
	if err := tryLock(); err != nil {
		t.Fatalf("the block of a killed process is still locked: %v", err)
	}
}

// Allocation: consecutive runs within a block, no uid handed out twice,
// freed uids reused, and nothing larger than a block.
func TestUIDAllocation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lease directory is root's")
	}
	seen := map[int]bool{}
	var singles []int
	for range 100 {
		uid, err := allocateUID()
		if err != nil {
			t.Fatal(err)
		}
		if seen[uid] || !InUIDSpan(uid) {
			t.Fatalf("uid %d reused or out of the span", uid)
		}
		seen[uid] = true
		singles = append(singles, uid)
	}
	first, err := ReserveUIDs(MaxCellUIDs + 1)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := uidBlocks()
	if (first-HostUIDBase)%size != 0 {
		t.Errorf("a whole block's range starts at %d, inside a block", first)
	}
	for uid := first; uid <= first+MaxCellUIDs; uid++ {
		if seen[uid] {
			t.Fatalf("uid %d of the range was already held", uid)
		}
	}
	if _, err := ReserveUIDs(size + 1); !errors.Is(err, ErrNoUIDs) {
		t.Errorf("more uids than a block: %v", err)
	}
	ReleaseUIDs(first, MaxCellUIDs+1)
	for _, u := range singles {
		ReleaseUID(u)
	}
	again, err := ReserveUIDs(MaxCellUIDs + 1)
	if err != nil {
		t.Fatalf("a freed block is not reused: %v", err)
	}
	ReleaseUIDs(again, MaxCellUIDs+1)
}

// ClaimUID holds one given uid (a memory image's) as ReserveUID would:
// never one this process or another holds, and nothing hands it out again
// while it is held.
func TestClaimUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lease directory is root's")
	}
	uid, err := ReserveUID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ClaimUID(uid); !errors.Is(err, ErrNoUIDs) {
		t.Fatalf("claimed a uid held here: %v", err)
	}
	ReleaseUID(uid)
	if err := ClaimUID(uid); err != nil {
		t.Fatalf("claim a free uid: %v", err)
	}
	var got []int
	for range 50 {
		u, err := ReserveUID()
		if err != nil {
			t.Fatal(err)
		}
		if u == uid {
			t.Fatalf("uid %d handed out while claimed", uid)
		}
		got = append(got, u)
	}
	for _, u := range got {
		ReleaseUID(u)
	}
	ReleaseUID(uid)
	if err := ClaimUID(HostUIDBase - 1); !errors.Is(err, ErrNoUIDs) {
		t.Fatalf("claimed a uid out of the span: %v", err)
	}

	// A uid of another process's block.
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), uidHolderEnv+"=1")
	stdin, _ := holder.StdinPipe()
	stdout, _ := holder.StdoutPipe()
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = holder.Process.Kill(); _ = holder.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	theirUID, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "uid "))
	if err != nil || theirUID == 0 {
		t.Fatalf("holder said %q (%v)", line, err)
	}
	if err := ClaimUID(theirUID + 1); !errors.Is(err, ErrNoUIDs) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("claimed a uid of another process's block: %v", err)
	}
}
