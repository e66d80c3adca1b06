package jail

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The init's command: this binary, re-executed through its descriptor
// into new namespaces, as the sandbox's uid, with its descriptors in
// place.

// command prepares the re-execution of this binary as the sandbox's init.
// It returns the uid allocated for the sandbox (0 when the caller reserved
// one, or rootless) and the uid it runs as.
func (s *Sandbox) command(fds *sandboxFiles) (allocated, uid int, cmd *exec.Cmd, err error) {
	uid, gid := os.Geteuid(), os.Getegid()
	ids := 1
	if !s.host.Rootless {
		// A server gives each sandbox a host uid of its own, outside any
		// account, leased host-wide, so no two sandboxes share an
		// identity or a per-user kernel limit on the host.
		uid = s.spec.HostUID // the caller's reservation
		if uid == 0 {
			if uid, err = allocateUID(); err != nil {
				return 0, 0, nil, err
			}
			allocated = uid
		} else if s.spec.Nested {
			ids += s.spec.CellUIDs // the zygote's cells, one uid each
		}
		gid = uid
	}
	attr := userNSAttr(uid, gid, ids)
	if s.rootInside() {
		attr = rootInsideAttr(uid - SandboxUID)
	}
	attr.Cloneflags |= unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	if s.spec.NetNS == nil {
		attr.Cloneflags |= unix.CLONE_NEWNET // else the one startInit's thread is in
	}
	attr.AmbientCaps = capsOf(s.cellUIDs())
	if s.rootInside() {
		attr.AmbientCaps = append(slices.Clone(attr.AmbientCaps), rootCaps...) // spawnerCaps, kept past the exec
	}
	attr.Pdeathsig = syscall.SIGKILL
	attr.Setsid = true
	// Positions are the init's descriptor numbers from 3 on; nil closes one.
	files := []*os.File{fds.initControl, fds.initChannel, executable(), fds.workspace, fds.initForward}
	// From fdBinds on, one per Spec.Binds entry (nil: the init opens it).
	files = append(files, fds.binds...)
	if fds.root != nil {
		// Then the detached mounts of the root's entries (see fdRoot).
		files = append(files, fds.root.trees...)
	}
	if fds.machineRoot != nil {
		fds.machineRootFD = 3 + len(files)
		files = append(files, fds.machineRoot)
	}
	cmd = &exec.Cmd{
		Path:        fmt.Sprintf("/proc/self/fd/%d", fdExe),
		Args:        []string{"codecage-init", initArg},
		Env:         []string{"GOMAXPROCS=1", "GOGC=50"},
		Stdin:       fds.stdinR, // the program's stdin pipe, or nil (/dev/null)
		Stdout:      fds.stdoutW,
		Stderr:      fds.stderrW,
		ExtraFiles:  files,
		SysProcAttr: attr,
	}
	return allocated, uid, cmd, nil
}

// userNSAttr maps n host ids from uid:gid on to SandboxUID on inside a new
// user namespace (n > 1: a zygote's, whose cells take the ids after its
// own) and keeps the child's capabilities there across the exec.
func userNSAttr(uid, gid, n int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:                 unix.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: SandboxUID, HostID: uid, Size: n}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: SandboxUID, HostID: gid, Size: n}},
		GidMappingsEnableSetgroups: false,
		Credential:                 &syscall.Credential{Uid: SandboxUID, Gid: SandboxUID, NoSetGroups: true},
	}
}

// rootInsideAttr maps the ids 0 to MachineIDs-1 onto the host's from
// first on (uid and gid alike), lets the sandbox's own root set groups of
// those ids, and starts the init as SandboxUID with no supplementary
// group (the supervisor's would otherwise come along).
func rootInsideAttr(first int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:                 unix.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: first, Size: MachineIDs}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: first, Size: MachineIDs}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: SandboxUID, Gid: SandboxUID, Groups: []uint32{}},
	}
}

// rootInside reports whether the machine maps root and its block of ids
// (Spec.RootInside; a caller's reservation, root on the host only).
func (s *Sandbox) rootInside() bool {
	return s.spec.RootInside && s.spec.Machine && !s.host.Rootless && s.spec.HostUID != 0
}

// cellUIDs is how many uids the nested program's cells have, one each
// (none: they share the program's, rootless).
func (s *Sandbox) cellUIDs() int {
	if !s.spec.Nested || s.host.Rootless || s.spec.HostUID == 0 {
		return 0
	}
	return s.spec.CellUIDs
}

var (
	exeOnce sync.Once
	exeFile *os.File
)

// executable is this binary, opened once: the init is executed through the
// descriptor, so it works for any host uid and survives a replaced file.
func executable() *os.File {
	exeOnce.Do(func() {
		f, err := os.Open("/proc/self/exe")
		if err != nil {
			panic(fmt.Sprintf("jail: open own executable: %v", err))
		}
		exeFile = f
	})
	return exeFile
}
