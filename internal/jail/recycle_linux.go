package jail

import (
	"bytes"
	"strconv"
	"sync"
	"time"
)

// A zygote's cells come and go by the hundred a second, and each needs a
// cgroup: making one (a directory in each hierarchy, its limits written)
// and removing it cost the supervisor more than the rest of a cell. So
// the cgroup of an ended cell, once empty and its counters reset, waits in
// a free list for the next cell with the same limits. A cgroup is the
// cell's counters and limits, not a boundary between consecutive cells:
// the next cell gets it only when no task is left in it, nothing is
// charged to it any more, and every counter the supervisor reports reads
// zero, as in a new one.

// cellKey is what a cell's cgroup was made for: the limits written into it.
type cellKey struct {
	memory   int64
	pids     int
	cpuQuota int64
}

const (
	// maxFreeCellCgroups bounds the free list: at a few hundred cells a
	// second, with each cgroup settling for a few hundred milliseconds,
	// a smaller list overflows in one burst and runs dry in the next.
	maxFreeCellCgroups = 64
	// settleTick is how often the cgroups of ended cells are looked at
	// (they take 100-300 ms to settle).
	settleTick = 100 * time.Millisecond
	// settleWait bounds how long an ended cell's cgroup may take to
	// settle (see [cgroup.settled]) before it is removed instead.
	settleWait = 2 * time.Second
)

// idleRelease is how long recycling outlives the last NewCell: a service
// that runs less than a few cells a second gains nothing from it, and an
// idle one keeps no cgroup that no cell uses. (A variable for tests.)
var idleRelease = 100 * time.Millisecond

// cellCgroups are the cgroups of ended cells: settling (waiting for the
// kernel to release what the cell left), and free. Recycling is on from
// a NewCell until ReleaseCellCgroups (a service that closes leaves none
// behind) or until idleRelease has passed without a NewCell.
var cellCgroups struct {
	sync.Mutex
	on       bool
	used     time.Time // the last NewCell
	free     map[cellKey][]*cgroup
	n        int // in free
	settling []settlingCgroup
	watching bool // a goroutine watches settling and free
}

type settlingCgroup struct {
	cg    *cgroup
	ended time.Time
}

// cellCgroup returns a cgroup for a cell with limits lim: a recycled one,
// or a new one.
func cellCgroup(host cgroupHost, lim Limits) (*cgroup, error) {
	key := cellKey{lim.MemoryBytes, lim.MaxProcesses, cpuQuota(lim.CPUCores)}
	cellCgroups.Lock()
	cellCgroups.on, cellCgroups.used = true, time.Now()
	if l := cellCgroups.free[key]; len(l) > 0 {
		cg := l[len(l)-1]
		l[len(l)-1] = nil
		cellCgroups.free[key] = l[:len(l)-1]
		cellCgroups.n--
		cellCgroups.Unlock()
		return cg, nil
	}
	cellCgroups.Unlock()
	// Named apart from the cell: a recycled cgroup serves many.
	cg, err := newCgroup(host, "cell-"+NewID(), lim, false)
	if err != nil {
		return nil, err
	}
	cg.key = key
	return cg, nil
}

// retireCellCgroup takes the cgroup of a cell that has ended (or never
// started), which no longer touches it: it is reused once it has settled,
// or removed. It does not block.
func retireCellCgroup(cg *cgroup) {
	cellCgroups.Lock()
	if !recyclingLocked() || cg.dirty.Load() || cg.key == (cellKey{}) {
		cellCgroups.Unlock()
		go destroyCgroup(cg)
		return
	}
	cellCgroups.settling = append(cellCgroups.settling, settlingCgroup{cg, time.Now()})
	if !cellCgroups.watching {
		cellCgroups.watching = true
		go watchSettling()
	}
	cellCgroups.Unlock()
}

// recyclingLocked reports whether cgroups are kept for reuse now.
func recyclingLocked() bool {
	return cellCgroups.on && time.Since(cellCgroups.used) < idleRelease
}

// watchSettling moves the cgroups of ended cells that have settled to the
// free list, every settleTick, and removes them all once recycling stops;
// it returns when none is left.
func watchSettling() {
	for {
		time.Sleep(settleTick)
		cellCgroups.Lock()
		if !recyclingLocked() {
			releaseLocked()
			cellCgroups.watching = false
			cellCgroups.Unlock()
			return
		}
		batch := cellCgroups.settling
		cellCgroups.settling = nil
		cellCgroups.Unlock()
		var later []settlingCgroup
		for _, s := range batch {
			switch settled := s.cg.settled(); {
			case settled && s.cg.reset() && keepFree(s.cg):
			case !settled && time.Since(s.ended) < settleWait:
				later = append(later, s)
			default:
				go destroyCgroup(s.cg)
			}
		}
		cellCgroups.Lock()
		cellCgroups.settling = append(later, cellCgroups.settling...)
		cellCgroups.Unlock()
	}
}

// keepFree adds a reset cgroup to the free list, if there is room.
func keepFree(cg *cgroup) bool {
	cellCgroups.Lock()
	defer cellCgroups.Unlock()
	if !recyclingLocked() || cellCgroups.n >= maxFreeCellCgroups {
		return false
	}
	if cellCgroups.free == nil {
		cellCgroups.free = map[cellKey][]*cgroup{}
	}
	cellCgroups.free[cg.key] = append(cellCgroups.free[cg.key], cg)
	cellCgroups.n++
	return true
}

// releaseLocked removes the free and settling cgroups, off the caller's
// goroutine.
func releaseLocked() {
	for _, l := range cellCgroups.free {
		for _, cg := range l {
			go destroyCgroup(cg)
		}
	}
	for _, s := range cellCgroups.settling {
		go destroyCgroup(s.cg)
	}
	cellCgroups.free, cellCgroups.n, cellCgroups.settling = nil, 0, nil
}

func destroyCgroup(cg *cgroup) { _ = cg.destroy() }

// ReleaseCellCgroups removes the cgroups kept for reuse by the next cells
// (see [NewCell]) and keeps none until the next NewCell: the owner of the
// cells calls it when it closes, so that no cgroup outlives it. A cell
// still running removes its cgroup when it ends.
func ReleaseCellCgroups() {
	cellCgroups.Lock()
	free, settling := cellCgroups.free, cellCgroups.settling
	cellCgroups.on, cellCgroups.free, cellCgroups.n, cellCgroups.settling = false, nil, 0, nil
	cellCgroups.Unlock()
	for _, l := range free {
		for _, cg := range l {
			_ = cg.destroy()
		}
	}
	for _, s := range settling {
		_ = s.cg.destroy()
	}
}

// settled reports whether the cgroup of an ended cell is empty: no task
// in it and no memory charged to it any more. pids.current counts a task
// from its fork until it is reaped; a cell's tasks all joined every
// hierarchy together (its first process joins them one by one before it
// may start anything, the cgroup is marked dirty if that fails halfway,
// and children are born where their parent is), so no task counted here
// means no task in any hierarchy. What a dead cell leaves charged (kernel
// objects freed after RCU grace periods, and the charges each CPU keeps in
// advance for a cgroup, which other cgroups' charges push out) would count
// against the next cell's limit and show in its peak: the cgroup waits
// until it reads zero, which takes 100-300 ms under load.
func (cg *cgroup) settled() bool {
	// Memory first: it is what takes long.
	return cg.readIntOK(cgMemory) == 0 && cg.readIntOK(cgPidsCurrent) == 0
}

// reset makes the counters of a settled cgroup read as in a new one: it
// resets those the kernel can reset and records the base of the others.
// False when it cannot.
func (cg *cgroup) reset() bool {
	if cg.version == 1 {
		// Writing 0 sets the peak to the usage now (zero), and clears the
		// CPU time.
		if cg.write(cgPeak, "0") != nil || cg.write(cgCPU, "0") != nil {
			return false
		}
		cg.cpuBase = 0
	} else {
		// memory.peak resets for reads through the same descriptor (Linux
		// 6.12); cpu.stat cannot be reset: its reading now is the base.
		if cg.write(cgPeak, "reset") != nil {
			return false
		}
		cg.cpuBase = 0
		cg.cpuBase = cg.cpuUsage()
	}
	cg.oomBase = 0
	cg.oomBase = cg.oomKills() // oom_kill only ever grows
	if cg.write(cgPidsMax, strconv.Itoa(cg.key.pids+initHeadroom)) != nil {
		return false
	}
	return cg.memoryPeak() == 0
}

// readIntOK is readInt, but -1 when the file cannot be read.
func (cg *cgroup) readIntOK(f cgFile) int64 {
	var buf [64]byte
	n := cg.read(f, buf[:])
	if n == 0 {
		return -1
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(buf[:n])), 10, 64)
	if err != nil {
		return -1
	}
	return v
}
