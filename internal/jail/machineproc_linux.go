package jail

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A machine's /proc (Spec.Machine). ps, top and free read host-wide files
// (meminfo, stat, uptime, loadavg) that the pid-only proc of every other
// sandbox lacks (ProcOptions). A machine gets a full proc with each
// host-wide entry covered before anything runs: those four by files the
// init renders from its sandbox's cgroup, as LXCFS does for containers,
// and every other by an empty read-only file or directory. So a program
// reads the machine's memory and CPU, never the host's, and no procfs file
// is reachable that other sandboxes cannot reach.
//
// The clocks stay the host's: a time namespace would have given the machine
// a boot of its own, but the kernel refuses a CLONE_VM fork (Go's fork) from
// a thread whose children enter another time namespace. The boot time and
// uptime are the host's, which every sandbox reads already in each
// process's start time (/proc/<pid>/stat); ps computes ages from the two.

// machineProcFiles are the files the init renders, in machineProc.files'
// order.
var machineProcFiles = [...]string{"meminfo", "stat", "uptime", "loadavg"}

// machineStats are the figures of a machine's cgroup that the supervisor
// sends its init (supervisorOrder.Stats).
type machineStats struct {
	// MemoryUsed is what the cgroup uses, page cache included; Cache is
	// its page cache, Shared the part of it that is tmpfs (not
	// reclaimable: the workspace and /tmp live there).
	MemoryUsed, Cache, Shared int64
	// CPU is the CPU time of all its processes (ns); Tasks counts them.
	CPU   int64
	Tasks int64
}

// machineProc is the init's side: the files it renders, kept open for
// writing (the proc entries are read-only binds of them).
type machineProc struct {
	files    [len(machineProcFiles)]*os.File
	memTotal int64
	cpus     int
	btime    int64 // the host's boot, in seconds since the epoch
	// buf is reused by render, which the order reader alone calls.
	buf bytes.Buffer
}

// mountMachineProc mounts a machine's /proc, before pivot_root (see
// mountProc): a small tmpfs holding the rendered files first, then the full
// proc over it, then the covers. The tmpfs stays under the proc, out of
// reach by any path; the init writes its files through the descriptors.
func mountMachineProc(cfg *initConfig) (*machineProc, error) {
	dir := newRoot + "/proc"
	if err := os.Mkdir(dir, 0o555); err != nil {
		return nil, err
	}
	if err := mountTmpfsFlags(dir, "size=64k,nr_inodes=16,mode=0755", scratchFlags); err != nil {
		return nil, err
	}
	mp := &machineProc{memTotal: cfg.MachineMemory, cpus: onlineCPUs(), btime: bootTime()}
	for i, name := range machineProcFiles {
		f, err := os.OpenFile(dir+"/"+name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			mp.close()
			return nil, err
		}
		mp.files[i] = f
	}
	empty, err := os.OpenFile(dir+"/empty", os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		mp.close()
		return nil, err
	}
	defer empty.Close()
	mp.render(machineStats{})
	if err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		mp.close()
		return nil, fmt.Errorf("mount /proc: %w", err)
	}
	if err := mp.cover(dir, empty); err != nil {
		mp.close()
		return nil, err
	}
	return mp, nil
}

// fdPath names an open file through the host's proc (the sandbox's is not
// the root yet): a bind of it binds the file itself.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// cover places the rendered files over their proc entries, and an empty
// read-only file or directory over every other entry that is not a
// process's (pids, self, thread-self, and the links into self).
func (mp *machineProc) cover(dir string, empty *os.File) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	rendered := map[string]*os.File{}
	for i, name := range machineProcFiles {
		rendered[name] = mp.files[i]
	}
	// The first cover of each kind is made read-only; the others bind it,
	// one call each (a bind keeps its source's read-only flag).
	firstFile, firstDir := "", ""
	for _, e := range entries {
		name := e.Name()
		target := dir + "/" + name
		var err error
		switch {
		case isPID(name) || name == "self" || name == "thread-self" || e.Type()&os.ModeSymlink != 0:
			continue
		case rendered[name] != nil:
			err = bindOver(fdPath(rendered[name]), target)
		case e.IsDir() && firstDir != "":
			err = unix.Mount(firstDir, target, "", unix.MS_BIND, "")
		case e.IsDir():
			err = unix.Mount("tmpfs", target, "tmpfs", unix.MS_RDONLY|scratchFlags, "size=4k,nr_inodes=1,mode=0555")
			firstDir = target
		case firstFile != "":
			err = unix.Mount(firstFile, target, "", unix.MS_BIND, "")
		default:
			err = bindOver(fdPath(empty), target)
			firstFile = target
		}
		if err != nil {
			return fmt.Errorf("cover /proc/%s: %w", name, err)
		}
	}
	return nil
}

// bootTime is when the host booted, in seconds since the epoch.
func bootTime() int64 {
	var up unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &up)
	return time.Now().Add(-time.Duration(up.Nano())).Unix()
}

// bindOver binds src read-only over target, which exists (a proc entry,
// never created or opened here).
func bindOver(src, target string) error {
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.MountSetattr(-1, target, 0, &unix.MountAttr{Attr_set: roFlags | unix.MOUNT_ATTR_NOEXEC})
}

func isPID(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// onlineCPUs is how many CPUs the machine's processes may run on.
func onlineCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() == 0 {
		return 1
	}
	return set.Count()
}

func (mp *machineProc) close() {
	if mp == nil {
		return
	}
	for _, f := range mp.files {
		if f != nil {
			_ = f.Close()
		}
	}
}
