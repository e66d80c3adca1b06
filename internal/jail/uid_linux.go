package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// leaseBlock leases a block of the span no process holds: an exclusive,
// non-blocking flock on UIDLeaseDir/<first uid>.lock. The lock lives as
// long as the open file, so a crashed process frees its blocks. A block
// whose uids still run processes (the sandboxes of a process that just
// died, still being torn down) is passed over.
func leaseBlock(size, count int, held map[int]bool) (*uidBlock, error) {
	if count == 0 {
		return nil, fmt.Errorf("%w: the span of sandbox uids is empty", ErrNoUIDs)
	}
	dir, err := leaseDir()
	if err != nil {
		return nil, err
	}
	start := os.Getpid() % count // processes start apart: fewer lock attempts
	for i := range count {
		base := HostUIDBase + (start+i)%count*size
		if held[base] {
			continue
		}
		b, err := leaseBlockAt(dir, base, size)
		if err != nil {
			return nil, err
		}
		if b != nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: all %d blocks of %d uids from %d are leased by other processes (%s)", ErrNoUIDs, count, size, HostUIDBase, dir)
}

// leaseBlockAt leases the block from base, or returns nil when another
// process holds it or its uids still run processes.
func leaseBlockAt(dir string, base, size int) (*uidBlock, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(base)+".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: lease file: %v", ErrNoUIDs, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil // another process's
		}
		return nil, fmt.Errorf("%w: lock %s: %v", ErrNoUIDs, f.Name(), err)
	}
	if uidsRunning(base, size) {
		f.Close()
		return nil, nil
	}
	// The holder's pid, for whoever looks (codecage doctor, a human).
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return &uidBlock{base: base, used: make([]bool, size), free: size, lease: f}, nil
}

// leaseBlockOf leases the block from base for ClaimUID.
func leaseBlockOf(base, size int) (*uidBlock, error) {
	dir, err := leaseDir()
	if err != nil {
		return nil, err
	}
	return leaseBlockAt(dir, base, size)
}

// leaseDir makes UIDLeaseDir (mode 0700) and checks that only this user
// can change it: whoever could remove a lock file could make two
// processes lease one block.
func leaseDir() (string, error) {
	dir := UIDLeaseDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: lease directory: %v", ErrNoUIDs, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: lease directory: %v", ErrNoUIDs, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%w: lease directory %s must be a directory of uid %d that no one else may write (mode 0700)", ErrNoUIDs, dir, os.Geteuid())
	}
	return dir, nil
}

// uidsRunning reports whether a host process has a real, effective, saved
// or filesystem uid in [base, base+n).
func uidsRunning(base, n int) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone meanwhile
		}
		_, rest, ok := strings.Cut(string(b), "\nUid:")
		if !ok {
			continue
		}
		line, _, _ := strings.Cut(rest, "\n")
		for _, f := range strings.Fields(line) {
			if uid, err := strconv.Atoi(f); err == nil && uid >= base && uid < base+n {
				return true
			}
		}
	}
	return false
}
