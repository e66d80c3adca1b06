//go:build linux && (amd64 || arm64)

package seccomp

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Verdicts as the kernel sees them.
const (
	wantAllow = unix.SECCOMP_RET_ALLOW
	wantKill  = unix.SECCOMP_RET_KILL_PROCESS
	wantEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	wantNOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	wantNOFAM = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
)

// x32Bit is written out here rather than taken from the package so the test
// states the ABI fact independently.
const x32Bit = 0x40000000

// expectedDenied is the spec's unconditional EPERM list, restated
// independently of deniedSyscalls.
var expectedDenied = map[string]uint32{
	"ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV,
	"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "process_madvise": unix.SYS_PROCESS_MADVISE,
	"pidfd_getfd": unix.SYS_PIDFD_GETFD, "kcmp": unix.SYS_KCMP,
	"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT,
	"chroot": unix.SYS_CHROOT, "fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG,
	"fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK, "move_mount": unix.SYS_MOVE_MOUNT,
	"open_tree": unix.SYS_OPEN_TREE, "open_tree_attr": unix.SYS_OPEN_TREE_ATTR,
	"mount_setattr": unix.SYS_MOUNT_SETATTR, "keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY,
	"request_key": unix.SYS_REQUEST_KEY, "bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN,
	"userfaultfd": unix.SYS_USERFAULTFD, "io_uring_setup": unix.SYS_IO_URING_SETUP,
	"io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
	"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
	"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE,
	"delete_module": unix.SYS_DELETE_MODULE, "reboot": unix.SYS_REBOOT, "swapon": unix.SYS_SWAPON,
	"swapoff": unix.SYS_SWAPOFF, "syslog": unix.SYS_SYSLOG, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT, "sethostname": unix.SYS_SETHOSTNAME,
	"setdomainname": unix.SYS_SETDOMAINNAME, "clock_settime": unix.SYS_CLOCK_SETTIME,
	"clock_adjtime": unix.SYS_CLOCK_ADJTIME, "settimeofday": unix.SYS_SETTIMEOFDAY,
	"adjtimex": unix.SYS_ADJTIMEX, "acct": unix.SYS_ACCT, "quotactl": unix.SYS_QUOTACTL,
	"quotactl_fd": unix.SYS_QUOTACTL_FD, "lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE,
	"vhangup": unix.SYS_VHANGUP, "fanotify_init": unix.SYS_FANOTIFY_INIT, "nfsservctl": unix.SYS_NFSSERVCTL,
	"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS,
}

// amd64OnlyDenied holds the denied syscalls that exist only on x86_64, with
// their numbers from arch/x86/entry/syscalls/syscall_64.tbl written out so
// a wrong unix.SYS_* mapping in arch_amd64.go would be caught.
var amd64OnlyDenied = map[string]uint32{
	"uselib": 134, "ustat": 136, "sysfs": 139, "_sysctl": 156,
	"iopl": 172, "ioperm": 173, "create_module": 174, "get_kernel_syms": 177,
	"query_module": 178, "afs_syscall": 183, "tuxcall": 184, "security": 185,
	"vserver": 236,
}

// allDenied returns expectedDenied plus the arch-only entries.
func allDenied() map[string]uint32 {
	m := make(map[string]uint32, len(expectedDenied)+len(amd64OnlyDenied))
	for k, v := range expectedDenied {
		m[k] = v
	}
	if runtime.GOARCH == "amd64" {
		for k, v := range amd64OnlyDenied {
			m[k] = v
		}
	}
	return m
}

// seccompData builds the struct seccomp_data buffer for bpf.VM.
//
// The kernel runs the filter with 32-bit loads in native byte order
// (little-endian on amd64 and arm64), so it sees nr at 0, arch at 4 and,
// for each 64-bit argument i, the low half at 16+8i and the high half at
// 20+8i. The x/net/bpf VM instead decodes every 32-bit load big-endian. To
// make the VM observe exactly the values the kernel would, each 32-bit word
// is written big-endian at the offset where the kernel finds it; a 64-bit
// argument thus becomes two big-endian words, low half first.
func seccompData(arch, nr uint32, args ...uint64) []byte {
	buf := make([]byte, 64) // sizeof(struct seccomp_data)
	binary.BigEndian.PutUint32(buf[0:], nr)
	binary.BigEndian.PutUint32(buf[4:], arch)
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(buf[off:], uint32(a))
		binary.BigEndian.PutUint32(buf[off+4:], uint32(a>>32))
	}
	return buf
}

// filterVM is the assembled filter loaded into the x/net/bpf VM. It runs
// what Build returns (disassembled again), i.e. exactly what Install would
// hand to the kernel.
type filterVM struct {
	t  *testing.T
	vm *bpf.VM
}

func newFilterVM(t *testing.T, opts Options) *filterVM {
	t.Helper()
	prog, err := Build(opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, f := range prog {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("Disassemble: not every instruction decoded: %v", insns)
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatalf("NewVM: %v", err)
	}
	return &filterVM{t: t, vm: vm}
}

// run evaluates a native-arch syscall.
func (f *filterVM) run(nr uint32, args ...uint64) uint32 {
	return f.runArch(nativeAuditArch, nr, args...)
}

func (f *filterVM) runArch(arch, nr uint32, args ...uint64) uint32 {
	f.t.Helper()
	out, err := f.vm.Run(seccompData(arch, nr, args...))
	if err != nil {
		f.t.Fatalf("VM run (arch %#x nr %d): %v", arch, nr, err)
	}
	return uint32(out)
}

// expect asserts the verdict for a native-arch syscall.
func (f *filterVM) expect(desc string, want uint32, nr uint32, args ...uint64) {
	f.t.Helper()
	if got := f.run(nr, args...); got != want {
		f.t.Errorf("%s: got verdict %s, want %s", desc, verdict(got), verdict(want))
	}
}

func verdict(v uint32) string {
	switch {
	case v == wantAllow:
		return "ALLOW"
	case v == wantKill:
		return "KILL_PROCESS"
	case v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return fmt.Sprintf("ERRNO(%v)", unix.Errno(v&unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("%#x", v)
}

func TestProgramShape(t *testing.T) {
	prog, err := Build(Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Comfortably below BPF_MAXINSNS (4096) and the kernel's cost limits.
	if len(prog) == 0 || len(prog) > 512 {
		t.Fatalf("program has %d instructions, want 1..512", len(prog))
	}
	for i, ins := range prog {
		// Every absolute load must be an aligned 32-bit word inside
		// struct seccomp_data (64 bytes); the kernel rejects anything else.
		if ins.Code == unix.BPF_LD|unix.BPF_W|unix.BPF_ABS && (ins.K%4 != 0 || ins.K+4 > 64) {
			t.Errorf("instruction %d loads invalid offset %d", i, ins.K)
		}
		if ins.Code&0x07 == unix.BPF_JMP && ins.Code != unix.BPF_JMP|unix.BPF_JA {
			if i+1+int(ins.Jt) >= len(prog) || i+1+int(ins.Jf) >= len(prog) {
				t.Errorf("instruction %d jumps out of the program", i)
			}
		}
	}
	if last := prog[len(prog)-1]; last.Code != unix.BPF_RET|unix.BPF_K || last.K != wantNOSYS {
		t.Errorf("last instruction is %+v, want ret ERRNO(ENOSYS) (default deny)", last)
	}
}

func TestArchAndABI(t *testing.T) {
	f := newFilterVM(t, Options{})
	foreign := []uint32{0, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM}
	if nativeAuditArch == unix.AUDIT_ARCH_X86_64 {
		foreign = append(foreign, unix.AUDIT_ARCH_AARCH64)
	} else {
		foreign = append(foreign, unix.AUDIT_ARCH_X86_64)
	}
	for _, arch := range foreign {
		// Even harmless syscalls are killed: numbers mean nothing across ABIs.
		for _, nr := range []uint32{0, 1, 3, unix.SYS_GETPID, unix.SYS_EXIT_GROUP} {
			if got := f.runArch(arch, nr); got != wantKill {
				t.Errorf("arch %#x nr %d: got %s, want KILL_PROCESS", arch, nr, verdict(got))
			}
		}
	}

	if runtime.GOARCH == "amd64" {
		for _, nr := range []uint32{x32Bit | unix.SYS_READ, x32Bit | unix.SYS_GETPID, x32Bit | 512, x32Bit | unix.SYS_PTRACE} {
			f.expect(fmt.Sprintf("x32 nr %#x", nr), wantKill, nr)
		}
		f.expect("nr just below the x32 bit", wantNOSYS, x32Bit-1)
	}
}

func TestClone(t *testing.T) {
	f := newFilterVM(t, Options{})
	f.expect("clone3", wantNOSYS, unix.SYS_CLONE3)
	f.expect("clone3 with args", wantNOSYS, unix.SYS_CLONE3, 0x7ffd0000, 88)

	for name, flag := range map[string]uint64{
		"CLONE_NEWNS": unix.CLONE_NEWNS, "CLONE_NEWCGROUP": unix.CLONE_NEWCGROUP,
		"CLONE_NEWUTS": unix.CLONE_NEWUTS, "CLONE_NEWIPC": unix.CLONE_NEWIPC,
		"CLONE_NEWUSER": unix.CLONE_NEWUSER, "CLONE_NEWPID": unix.CLONE_NEWPID,
		"CLONE_NEWNET": unix.CLONE_NEWNET, "CLONE_NEWTIME": unix.CLONE_NEWTIME,
	} {
		f.expect("clone "+name, wantEPERM, unix.SYS_CLONE, flag)
		f.expect("clone SIGCHLD|"+name, wantEPERM, unix.SYS_CLONE, flag|uint64(unix.SIGCHLD))
		f.expect("clone "+name+" with high bits", wantEPERM, unix.SYS_CLONE, 0xffffffff00000000|flag)
	}
	f.expect("clone CLONE_NEWUSER|CLONE_NEWNS|SIGCHLD", wantEPERM, unix.SYS_CLONE,
		unix.CLONE_NEWUSER|unix.CLONE_NEWNS|uint64(unix.SIGCHLD))

	pthread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
		unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	f.expect("clone fork (SIGCHLD)", wantAllow, unix.SYS_CLONE, uint64(unix.SIGCHLD))
	f.expect("clone fork with child tid", wantAllow, unix.SYS_CLONE,
		unix.CLONE_CHILD_SETTID|unix.CLONE_CHILD_CLEARTID|uint64(unix.SIGCHLD), 0, 0, 0x7f00_0000_1000)
	f.expect("clone pthread flags", wantAllow, unix.SYS_CLONE, pthread, 0x7f00_0000_0000, 0x7f00_0000_2000, 0x7f00_0000_3000, 0x7f00_0000_4000)
	f.expect("clone vfork (posix_spawn/os/exec)", wantAllow, unix.SYS_CLONE,
		unix.CLONE_VM|unix.CLONE_VFORK|unix.CLONE_PIDFD|uint64(unix.SIGCHLD))
	// clone(2) truncates flags to 32 bits, so high garbage changes nothing.
	f.expect("clone SIGCHLD with high bits", wantAllow, unix.SYS_CLONE, 0xffffffff00000000|uint64(unix.SIGCHLD))

	f.expect("unshare(0)", wantEPERM, unix.SYS_UNSHARE, 0)
	f.expect("unshare(CLONE_NEWUSER)", wantEPERM, unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	f.expect("unshare(CLONE_FILES)", wantEPERM, unix.SYS_UNSHARE, unix.CLONE_FILES)
	f.expect("setns", wantEPERM, unix.SYS_SETNS, 3, unix.CLONE_NEWNET)
}

func TestSocketFamilies(t *testing.T) {
	f := newFilterVM(t, Options{})
	for _, nr := range []uint32{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR} {
		for name, fam := range map[string]uint64{
			"AF_VSOCK": unix.AF_VSOCK, "AF_ALG": unix.AF_ALG, "AF_PACKET": unix.AF_PACKET,
			"AF_NETLINK": unix.AF_NETLINK, "AF_UNSPEC": unix.AF_UNSPEC, "AF_BLUETOOTH": unix.AF_BLUETOOTH,
			"AF_KEY": unix.AF_KEY, "AF_XDP": unix.AF_XDP, "AF_MAX": unix.AF_MAX, "0xffff": 0xffff,
		} {
			want := wantEPERM
			if fam == unix.AF_NETLINK {
				want = wantNOFAM // as a kernel without netlink answers
			}
			f.expect(fmt.Sprintf("nr %d %s", nr, name), want, nr, fam, unix.SOCK_RAW, 0)
			// High bits are ignored by the kernel (int domain) and must not
			// turn a denied family into an allowed one or vice versa.
			f.expect(fmt.Sprintf("nr %d %s high bits", nr, name), want, nr, unix.AF_INET<<32|fam, unix.SOCK_RAW, 0)
		}
		for name, fam := range map[string]uint64{
			"AF_UNIX": unix.AF_UNIX, "AF_INET": unix.AF_INET, "AF_INET6": unix.AF_INET6,
		} {
			f.expect(fmt.Sprintf("nr %d %s", nr, name), wantAllow, nr, fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			f.expect(fmt.Sprintf("nr %d %s high bits", nr, name), wantAllow, nr, 0xffffffff00000000|fam, unix.SOCK_DGRAM, 0)
		}
	}
}

func TestSocketFamilyOptions(t *testing.T) {
	only := newFilterVM(t, Options{AllowedSocketFamilies: []int{unix.AF_UNIX}})
	only.expect("unix-only: AF_UNIX", wantAllow, unix.SYS_SOCKET, unix.AF_UNIX)
	only.expect("unix-only: AF_INET", wantEPERM, unix.SYS_SOCKET, unix.AF_INET)
	only.expect("unix-only: socketpair AF_INET6", wantEPERM, unix.SYS_SOCKETPAIR, unix.AF_INET6)

	none := newFilterVM(t, Options{AllowedSocketFamilies: []int{}})
	for _, fam := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6} {
		none.expect(fmt.Sprintf("no sockets: family %d", fam), wantEPERM, unix.SYS_SOCKET, fam)
	}
	none.expect("no sockets: netlink", wantNOFAM, unix.SYS_SOCKET, unix.AF_NETLINK)
	none.expect("no sockets: other syscalls still allowed", wantAllow, unix.SYS_READ, 0)

	dup := newFilterVM(t, Options{AllowedSocketFamilies: []int{unix.AF_NETLINK, unix.AF_UNIX, unix.AF_NETLINK}})
	dup.expect("netlink allowed", wantAllow, unix.SYS_SOCKET, unix.AF_NETLINK)
	dup.expect("unix allowed", wantAllow, unix.SYS_SOCKETPAIR, unix.AF_UNIX)
	dup.expect("inet denied", wantEPERM, unix.SYS_SOCKET, unix.AF_INET)

	for _, bad := range [][]int{{-1}, {unix.AF_MAX}, {unix.AF_UNIX, 1 << 20}} {
		if _, err := Build(Options{AllowedSocketFamilies: bad}); err == nil {
			t.Errorf("Build with families %v: want error", bad)
		}
	}
}

func TestIoctl(t *testing.T) {
	f := newFilterVM(t, Options{})
	f.expect("TIOCSTI", wantEPERM, unix.SYS_IOCTL, 0, unix.TIOCSTI, 0x7fff0000)
	f.expect("TIOCSTI with high bits", wantEPERM, unix.SYS_IOCTL, 0, 0xffffffff00005412, 0x7fff0000)
	f.expect("TIOCLINUX", wantEPERM, unix.SYS_IOCTL, 1, unix.TIOCLINUX, 0)
	f.expect("TIOCLINUX with high bits", wantEPERM, unix.SYS_IOCTL, 1, 0x1_0000_541c, 0)
	f.expect("TCGETS", wantAllow, unix.SYS_IOCTL, 0, unix.TCGETS, 0x7fff0000)
	f.expect("TIOCINQ (FIONREAD)", wantAllow, unix.SYS_IOCTL, 3, unix.TIOCINQ, 0)
	// The request must be in args[1]; the same value elsewhere is harmless.
	f.expect("TIOCSTI value as fd", wantAllow, unix.SYS_IOCTL, unix.TIOCSTI, unix.TCGETS, 0)
}

func TestPersonality(t *testing.T) {
	f := newFilterVM(t, Options{})
	f.expect("personality(PER_LINUX)", wantAllow, unix.SYS_PERSONALITY, 0)
	f.expect("personality(query)", wantAllow, unix.SYS_PERSONALITY, 0xffffffff)
	f.expect("personality(query, high bits)", wantAllow, unix.SYS_PERSONALITY, 0xffffffffffffffff)
	f.expect("personality(ADDR_NO_RANDOMIZE)", wantEPERM, unix.SYS_PERSONALITY, 0x0040000)
	f.expect("personality(READ_IMPLIES_EXEC)", wantEPERM, unix.SYS_PERSONALITY, 0x0400000)
	f.expect("personality(PER_LINUX32)", wantEPERM, unix.SYS_PERSONALITY, 0x0008)
	f.expect("personality(ADDR_NO_RANDOMIZE) hidden in high bits", wantEPERM, unix.SYS_PERSONALITY, 0xffffffff_00040000)
}

func TestDeniedSyscalls(t *testing.T) {
	f := newFilterVM(t, Options{})
	for name, nr := range allDenied() {
		f.expect(name, wantEPERM, nr)
		f.expect(name+" with args", wantEPERM, nr, 1, 2, 3, 4, 5, 6)
	}
}

func TestAllowedSyscalls(t *testing.T) {
	f := newFilterVM(t, Options{})
	for name, nr := range map[string]uint32{
		"read": unix.SYS_READ, "write": unix.SYS_WRITE, "openat": unix.SYS_OPENAT,
		"mmap": unix.SYS_MMAP, "execve": unix.SYS_EXECVE, "exit_group": unix.SYS_EXIT_GROUP,
		"mbind": unix.SYS_MBIND,
		"futex": unix.SYS_FUTEX, "getpid": unix.SYS_GETPID, "seccomp": unix.SYS_SECCOMP,
		"prctl": unix.SYS_PRCTL, "wait4": unix.SYS_WAIT4,
	} {
		f.expect(name, wantAllow, nr, 3, 0x7fff0000, 0x1000)
	}
}

// TestUnlistedSyscalls: what the allow-list leaves out fails with ENOSYS,
// whatever the arguments: calls that act on other processes' pages, watch
// the shared root, flush the host's disks, or are newer than the list.
func TestUnlistedSyscalls(t *testing.T) {
	f := newFilterVM(t, Options{})
	for name, nr := range map[string]uint32{
		"migrate_pages": unix.SYS_MIGRATE_PAGES, "move_pages": unix.SYS_MOVE_PAGES,
		"set_mempolicy_home_node": unix.SYS_SET_MEMPOLICY_HOME_NODE,
		"inotify_init1":           unix.SYS_INOTIFY_INIT1, "inotify_add_watch": unix.SYS_INOTIFY_ADD_WATCH,
		"fanotify_mark": unix.SYS_FANOTIFY_MARK, "sync": unix.SYS_SYNC, "syncfs": unix.SYS_SYNCFS,
		"listmount": unix.SYS_LISTMOUNT, "statmount": unix.SYS_STATMOUNT, "mseal": unix.SYS_MSEAL,
		"lsm_get_self_attr": unix.SYS_LSM_GET_SELF_ATTR, "file_getattr": unix.SYS_FILE_GETATTR,
		"memfd_secret": unix.SYS_MEMFD_SECRET, "process_mrelease": unix.SYS_PROCESS_MRELEASE,
	} {
		f.expect(name, wantNOSYS, nr)
		f.expect(name+" with args", wantNOSYS, nr, 1, 2, 3, 4, 5, 6)
	}
}

// TestMemfd: only a memfd sealed against exec may be made.
func TestMemfd(t *testing.T) {
	f := newFilterVM(t, Options{})
	const cloexec, allowSealing, exec, noexecSeal = 0x1, 0x2, 0x10, 0x8
	f.expect("memfd_create(MFD_CLOEXEC)", wantEPERM, unix.SYS_MEMFD_CREATE, 0x1000, cloexec)
	f.expect("memfd_create(MFD_EXEC)", wantEPERM, unix.SYS_MEMFD_CREATE, 0x1000, exec|allowSealing)
	f.expect("memfd_create(seal in the high bits)", wantEPERM, unix.SYS_MEMFD_CREATE, 0x1000, noexecSeal<<32)
	f.expect("memfd_create(MFD_NOEXEC_SEAL)", wantAllow, unix.SYS_MEMFD_CREATE, 0x1000, noexecSeal|cloexec)
}

// TestVerdictTable sweeps the syscall number space: each number gets the
// verdict its list gives it (the binary search loses none), and a number
// on no list fails with ENOSYS.
func TestVerdictTable(t *testing.T) {
	f := newFilterVM(t, Options{})
	want := map[uint32]uint32{}
	for _, nr := range allDenied() {
		want[nr] = wantEPERM
	}
	for _, s := range slices.Concat(allowedSyscalls, archAllowedSyscalls) {
		if _, dup := want[s.nr]; dup {
			t.Errorf("%s is both allowed and denied", s.name)
		}
		want[s.nr] = wantAllow
	}
	special := map[uint32]bool{
		unix.SYS_CLONE3: true, unix.SYS_CLONE: true, unix.SYS_SOCKET: true, unix.SYS_MEMFD_CREATE: true,
		unix.SYS_SOCKETPAIR: true, unix.SYS_IOCTL: true, unix.SYS_PERSONALITY: true,
	}
	for nr := uint32(0); nr < 1024; nr++ {
		if special[nr] {
			continue
		}
		v, ok := want[nr]
		if !ok {
			v = wantNOSYS
		}
		f.expect(fmt.Sprintf("nr %d", nr), v, nr, 0, 0, 0)
	}
}

// TestAllowListReviewed: the allow-list (with the syscalls allowed under an
// argument rule) is testdata/allowed_<arch>.txt, one name a line. A change
// to the list shows in that file's diff, where it gets reviewed: nothing
// widens silently. Regenerate with CODECAGE_UPDATE_ALLOWLIST=1.
func TestAllowListReviewed(t *testing.T) {
	var got []string
	for _, s := range slices.Concat(allowedSyscalls, archAllowedSyscalls) {
		got = append(got, s.name)
	}
	got = append(got, "clone", "socket", "socketpair", "ioctl", "personality", "memfd_create")
	slices.Sort(got)
	file := "testdata/allowed_" + runtime.GOARCH + ".txt"
	text := strings.Join(got, "\n") + "\n"
	if os.Getenv("CODECAGE_UPDATE_ALLOWLIST") != "" {
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != text {
		t.Errorf("the allow-list differs from %s (%d names here): review the change and regenerate the file", file, len(got))
	}
	t.Logf("%d syscalls reachable", len(got))
}
