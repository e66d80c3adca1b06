package jail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Host uids for sandboxes (root mode). The span [HostUIDBase,
// +HostUIDCount) lies far above any account or subordinate-id range and is
// cut into blocks of uidBlockSize. A process leases a block for the whole
// host before it hands out any uid of it (uid_linux.go: an exclusive flock
// on a file under UIDLeaseDir, which the kernel drops when the process
// dies), so no two sandboxes on a host share a uid, whichever codecage
// process started them. Sandboxes, sessions, zygotes and the cells of a
// zygote each get uids of their own from the blocks this process holds.
var (
	HostUIDBase = 1_500_000_000
	// HostUIDCount holds 1024 blocks: a machine with root inside takes a
	// whole one (MachineIDs), beside each process's blocks of single uids.
	HostUIDCount = 1 << 20
	// UIDLeaseDir holds one lock file per leased block. Every codecage of
	// a host must see the same directory (a container running as root on
	// the host's ids needs the host's mounted there).
	UIDLeaseDir = "/run/codecage/uids"
)

// uidBlockSize is how many uids a block holds: enough for a server's
// sandboxes and its zygotes' cells, few enough that many processes (test
// binaries, several servers) each get blocks of their own.
const uidBlockSize = 1024

// MaxCellUIDs is the most cells a zygote can run at once with uids of
// their own: its range (one uid for itself, one per cell) fits in a block.
const MaxCellUIDs = uidBlockSize - 1

// MachineIDs is how many ids a machine with root inside maps
// (Spec.RootInside): a whole block, so that root, the system's own users
// (_apt, nobody's neighbours) and the users code adds all have host ids of
// the sandbox's own.
const MachineIDs = uidBlockSize

// ErrNoUIDs means no host uid could be had for a sandbox: every block is
// leased by other processes, or the lease directory is unusable. A
// sandbox never shares a uid instead.
var ErrNoUIDs = errors.New("jail: no free host uid")

// uidBlock is a block this process leased, and which of its uids are held.
type uidBlock struct {
	base  int
	used  []bool
	free  int
	next  int       // where the next search starts: a freed uid is not reused at once
	lease io.Closer // ends the host-wide lease
}

var uids struct {
	sync.Mutex
	blocks []*uidBlock // blocks[0] is kept for the process's life
	ever   [][2]int    // [first, end) of every block leased, for LeasedUIDRanges
}

// uidBlocks is the block size and how many blocks the span holds (the
// span may have been shrunk to fit a container's id map).
func uidBlocks() (size, count int) {
	size = min(uidBlockSize, HostUIDCount)
	if size <= 0 {
		return 0, 0
	}
	return size, HostUIDCount / size
}

// allocateUIDs returns the first of n consecutive host uids that no other
// sandbox on the host holds, leasing a block when the ones held are full.
func allocateUIDs(n int) (int, error) {
	size, count := uidBlocks()
	if n < 1 || n > size {
		return 0, fmt.Errorf("%w: %d consecutive uids asked, a block holds %d", ErrNoUIDs, n, size)
	}
	uids.Lock()
	defer uids.Unlock()
	for _, b := range uids.blocks {
		if i, ok := b.take(n); ok {
			return b.base + i, nil
		}
	}
	held := map[int]bool{}
	for _, b := range uids.blocks {
		held[b.base] = true
	}
	b, err := leaseBlock(size, count, held)
	if err != nil {
		return 0, err
	}
	uids.blocks = append(uids.blocks, b)
	if !slices.Contains(uids.ever, [2]int{b.base, b.base + size}) {
		uids.ever = append(uids.ever, [2]int{b.base, b.base + size})
	}
	i, _ := b.take(n)
	return b.base + i, nil
}

// take marks a run of n free uids used and returns its offset: the first
// run from next on, wrapping round once. Linear in the block's size.
func (b *uidBlock) take(n int) (int, bool) {
	size := len(b.used)
	if b.free < n {
		return 0, false
	}
	for _, span := range [][2]int{{b.next, size}, {0, b.next}} {
		run := 0
		for i := span[0]; i < span[1]; i++ {
			if b.used[i] {
				run = 0
				continue
			}
			if run++; run == n {
				start := i - n + 1
				for j := start; j <= i; j++ {
					b.used[j] = true
				}
				b.free -= n
				b.next = (i + 1) % size
				return start, true
			}
		}
	}
	return 0, false
}

// releaseUIDs frees n uids from first on; uids this process does not hold
// (0 among them) are ignored. A block emptied is given back to the host,
// except the first one and up to maxIdleBlocks others, which a busy process
// would only lease again.
func releaseUIDs(first, n int) {
	uids.Lock()
	defer uids.Unlock()
	for k, b := range uids.blocks {
		if first < b.base || first+n > b.base+len(b.used) {
			continue
		}
		for i := first - b.base; i < first-b.base+n; i++ {
			if b.used[i] {
				b.used[i] = false
				b.free++
			}
		}
		if k > 0 && b.free == len(b.used) && idleBlocks() > maxIdleBlocks {
			_ = b.lease.Close()
			uids.blocks = append(uids.blocks[:k], uids.blocks[k+1:]...)
		}
		return
	}
}

// maxIdleBlocks is how many emptied blocks a process keeps leased beside
// its first: a machine with root inside takes a whole block and gives it
// back at its close, and leasing one anew scans every host process
// (uidsRunning). Its uids are free to hand out at once: a sandbox's uids
// are released only once its init is reaped, and the kernel reaps every
// process of a pid namespace before its init.
const maxIdleBlocks = 4

// idleBlocks counts the held blocks, but the first, that hold no uid.
// The caller holds uids.
func idleBlocks() int {
	n := 0
	for _, b := range uids.blocks[1:] {
		if b.free == len(b.used) {
			n++
		}
	}
	return n
}

func allocateUID() (int, error) { return allocateUIDs(1) }

func releaseUID(uid int) { releaseUIDs(uid, 1) }

// ReserveUID holds a host uid for a caller that runs several sandboxes as
// one identity over time (a session's interpreter, its restarts and its
// commands share its workspace files). Release it with ReleaseUID.
func ReserveUID() (int, error) { return allocateUIDs(1) }

// ReleaseUID frees a uid from ReserveUID.
func ReleaseUID(uid int) { releaseUIDs(uid, 1) }

// ReserveUIDs holds n consecutive host uids (a zygote's: its own, then
// one per cell, see Spec.CellUIDs). Release them with ReleaseUIDs.
func ReserveUIDs(n int) (int, error) { return allocateUIDs(n) }

// BlocksFit reports whether n consecutive uids fit in a block of this
// host's span (ReserveUIDs(n) can succeed).
func BlocksFit(n int) bool {
	size, count := uidBlocks()
	return count > 0 && n <= size
}

// ReleaseUIDs frees the n uids from first on, from ReserveUIDs.
func ReleaseUIDs(first, n int) { releaseUIDs(first, n) }

// ClaimUID holds one given host uid of the span, as ReserveUID would have:
// the uid of a memory image that an earlier process made, whose restored
// sandboxes must run as it. It fails when another process leases the
// uid's block, when a process runs in that block while this process does
// not hold it yet, or when the uid is already held here. Release it with
// ReleaseUID.
func ClaimUID(uid int) error { return ClaimUIDs(uid, 1) }

// ClaimUIDs holds the n given host uids from first on, within one block,
// as ClaimUID does one: a machine image's whole block (root inside).
// Nothing is held when any of them cannot be. Release with ReleaseUIDs.
func ClaimUIDs(first, n int) error {
	size, _ := uidBlocks()
	if !InUIDSpan(first) || size == 0 || n < 1 {
		return fmt.Errorf("%w: %d is not a sandbox uid", ErrNoUIDs, first)
	}
	base := HostUIDBase + (first-HostUIDBase)/size*size
	if first+n > base+size {
		return fmt.Errorf("%w: uids %d to %d cross a block", ErrNoUIDs, first, first+n-1)
	}
	uids.Lock()
	defer uids.Unlock()
	var b *uidBlock
	for _, held := range uids.blocks {
		if held.base == base {
			b = held
		}
	}
	if b == nil {
		leased, err := leaseBlockOf(base, size)
		if err != nil {
			return err
		}
		if leased == nil {
			return fmt.Errorf("%w: uid %d: its block is another process's, or runs processes", ErrNoUIDs, first)
		}
		b = leased
		uids.blocks = append(uids.blocks, b)
		if !slices.Contains(uids.ever, [2]int{b.base, b.base + size}) {
			uids.ever = append(uids.ever, [2]int{b.base, b.base + size})
		}
	}
	for i := first - base; i < first-base+n; i++ {
		if b.used[i] {
			return fmt.Errorf("%w: uid %d is held by another sandbox of this process", ErrNoUIDs, base+i)
		}
	}
	for i := first - base; i < first-base+n; i++ {
		b.used[i] = true
	}
	b.free -= n
	return nil
}

// InUIDSpan reports whether uid is one sandboxes get in root mode, from
// any codecage process of the host (every block lies in the span).
func InUIDSpan(uid int) bool { return uid >= HostUIDBase && uid < HostUIDBase+HostUIDCount }

// LeasedUIDRanges are the [first, end) ranges of every block this process
// has leased so far: whatever ran as one of its sandboxes had a uid there.
func LeasedUIDRanges() [][2]int {
	uids.Lock()
	defer uids.Unlock()
	return slices.Clone(uids.ever)
}

// UIDRangesLeasedBy are the [first, end) ranges of the blocks whose lease
// file names pid as its holder, alive or gone (a lease file keeps the
// last holder's pid until another process takes the block): what another
// process, such as a test, reads to judge one server's sandboxes.
func UIDRangesLeasedBy(pid int) [][2]int {
	size, _ := uidBlocks()
	entries, _ := os.ReadDir(UIDLeaseDir)
	var ranges [][2]int
	for _, e := range entries {
		base, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".lock"))
		if err != nil || !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(UIDLeaseDir, e.Name()))
		if err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
			ranges = append(ranges, [2]int{base, base + size})
		}
	}
	return ranges
}
