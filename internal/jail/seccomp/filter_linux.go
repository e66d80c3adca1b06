//go:build linux && (amd64 || arm64)

package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// SockFilter is one classic-BPF instruction in the kernel's struct
// sock_filter layout, as produced by Build and consumed by Install.
type SockFilter = unix.SockFilter

// Offsets into struct seccomp_data (include/uapi/linux/seccomp.h):
//
//	int   nr;                  //  0
//	__u32 arch;                //  4
//	__u64 instruction_pointer; //  8
//	__u64 args[6];             // 16 + 8*i
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// argLow is the offset of the low 32 bits of syscall argument i. Both
// supported architectures are little-endian, so the low word comes first.
func argLow(i uint32) uint32 { return offArgs + 8*i }

// bpfMaxInsns is the kernel's BPF_MAXINSNS, the longest classic-BPF
// program it accepts.
const bpfMaxInsns = 4096

// maxSkip is the farthest a classic-BPF conditional jump can reach (its
// jt/jf offsets are 8 bits).
const maxSkip = 255

// Filter verdicts.
const (
	retAllow = unix.SECCOMP_RET_ALLOW
	// KILL_PROCESS rather than KILL_THREAD: killing a single thread would
	// leave the interpreter half alive and possibly deadlocked.
	retKill = unix.SECCOMP_RET_KILL_PROCESS
)

// retErrno makes the syscall fail with errno e without running it.
func retErrno(e unix.Errno) uint32 {
	return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA
}

// namespaceCloneFlags are the clone flags that create new namespaces. All
// of them are in the low 32 bits, which are the only bits clone(2) reads.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP |
	unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// mfdNoexecSeal is memfd_create's MFD_NOEXEC_SEAL (Linux 6.3): the memfd
// is not executable and sealed so that it cannot become so.
const mfdNoexecSeal = 0x0008

// personality(2) arguments that stay allowed: PER_LINUX keeps the default
// execution domain and 0xffffffff only queries the current one. Anything
// else could, for example, set ADDR_NO_RANDOMIZE to defeat ASLR.
const (
	perLinux = 0x0
	perQuery = 0xffffffff
)

// defaultSocketFamilies is used when Options.AllowedSocketFamilies is nil.
var defaultSocketFamilies = []int{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6}

// sysno names a syscall number; the name only serves error messages and
// tests.
type sysno struct {
	name string
	nr   uint32
}

// deniedSyscalls fail with EPERM unconditionally on every supported
// architecture (archDeniedSyscalls adds arch-only ones). They give access
// to other processes' memory, mount/namespace manipulation, kernel
// keyrings, eBPF, perf, io_uring (which bypasses seccomp for its
// operations), host-global state (clock, hostname, swap, modules, reboot)
// or file handles that escape the mount namespace.
//
// mbind, migrate_pages and move_pages are deliberately absent: numpy and
// other NUMA-aware libraries use them.
var deniedSyscalls = []sysno{
	{"ptrace", unix.SYS_PTRACE},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
	{"process_madvise", unix.SYS_PROCESS_MADVISE},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD},
	{"kcmp", unix.SYS_KCMP},
	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	{"chroot", unix.SYS_CHROOT},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fspick", unix.SYS_FSPICK},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"open_tree_attr", unix.SYS_OPEN_TREE_ATTR},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},
	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"reboot", unix.SYS_REBOOT},
	{"swapon", unix.SYS_SWAPON},
	{"swapoff", unix.SYS_SWAPOFF},
	{"syslog", unix.SYS_SYSLOG},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
	{"sethostname", unix.SYS_SETHOSTNAME},
	{"setdomainname", unix.SYS_SETDOMAINNAME},
	{"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
	{"settimeofday", unix.SYS_SETTIMEOFDAY},
	{"adjtimex", unix.SYS_ADJTIMEX},
	{"acct", unix.SYS_ACCT},
	{"quotactl", unix.SYS_QUOTACTL},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},
	{"vhangup", unix.SYS_VHANGUP},
	{"fanotify_init", unix.SYS_FANOTIFY_INIT},
	{"nfsservctl", unix.SYS_NFSSERVCTL},
}

// Build assembles the sandbox filter described in the package
// documentation. The result is ready for Install and is well below the
// kernel's 4096-instruction limit.
func Build(opts Options) ([]unix.SockFilter, error) {
	insns, err := program(opts)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble filter: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// program returns the filter as unassembled instructions.
//
// Layout: a prologue validates the ABI and loads nr into the accumulator;
// then one block per syscall whose verdict depends on its arguments:
//
//	jne nr, +len(body)   ; not this syscall: skip the block
//	body...              ; always ends in a return
//
// and last a binary search over the syscalls with a fixed verdict (allowed,
// or denied with EPERM), whose leaves return that verdict or ENOSYS for a
// number on no list. Every body returns, so the accumulator still holds nr
// wherever control falls through. The kernel caches the verdict of each
// syscall that is allowed whatever its arguments, so the search costs the
// hot path nothing; the argument blocks come first because they are never
// cached.
func program(opts Options) ([]bpf.Instruction, error) {
	families, err := socketFamilies(opts.AllowedSocketFamilies)
	if err != nil {
		return nil, err
	}

	b := &builder{seen: map[uint32]string{}}
	b.prog = append(b.prog,
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nativeAuditArch, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	)
	b.prog = append(b.prog, archNrChecks()...)

	// clone's flags are args[0] on both x86_64 and arm64 (only s390 swaps
	// the first two arguments).
	b.syscall(sysno{"clone", unix.SYS_CLONE},
		bpf.LoadAbsolute{Off: argLow(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: namespaceCloneFlags, SkipFalse: 1},
		bpf.RetConstant{Val: retErrno(unix.EPERM)},
		bpf.RetConstant{Val: retAllow},
	)
	for _, s := range []sysno{{"socket", unix.SYS_SOCKET}, {"socketpair", unix.SYS_SOCKETPAIR}} {
		b.syscall(s, familyIn(families)...)
	}
	b.syscall(sysno{"ioctl", unix.SYS_IOCTL},
		argIn(1, []uint32{unix.TIOCSTI, unix.TIOCLINUX}, retErrno(unix.EPERM), retAllow)...)
	b.syscall(sysno{"personality", unix.SYS_PERSONALITY},
		argIn(0, []uint32{perLinux, perQuery}, retAllow, retErrno(unix.EPERM))...)
	b.syscall(sysno{"memfd_create", unix.SYS_MEMFD_CREATE},
		bpf.LoadAbsolute{Off: argLow(1), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: mfdNoexecSeal, SkipTrue: 1},
		bpf.RetConstant{Val: retErrno(unix.EPERM)},
		bpf.RetConstant{Val: retAllow},
	)

	fixed, err := fixedVerdicts(b.seen)
	if err != nil {
		return nil, err
	}
	b.prog = append(b.prog, search(verdictRanges(fixed))...)
	if b.err != nil {
		return nil, b.err
	}
	if len(b.prog) > bpfMaxInsns {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, kernel limit is %d", len(b.prog), bpfMaxInsns)
	}
	return b.prog, nil
}

// retDefault is the verdict for a syscall on no list: ENOSYS, which libc
// and runtimes read as "this kernel lacks it" and fall back from.
var retDefault = retErrno(unix.ENOSYS)

// fixedVerdicts maps every syscall whose verdict does not depend on its
// arguments to that verdict; taken holds the ones with argument rules,
// which must not appear again.
func fixedVerdicts(taken map[uint32]string) (map[uint32]uint32, error) {
	out := map[uint32]uint32{}
	add := func(list []sysno, verdict uint32) error {
		for _, s := range list {
			if prev, dup := taken[s.nr]; dup {
				return fmt.Errorf("seccomp: syscall %d handled twice (%s, %s)", s.nr, prev, s.name)
			}
			taken[s.nr] = s.name
			out[s.nr] = verdict
		}
		return nil
	}
	steps := []struct {
		list    []sysno
		verdict uint32
	}{
		{slices.Concat(allowedSyscalls, archAllowedSyscalls), retAllow},
		// clone3's flags live in user memory that BPF cannot read; ENOSYS
		// makes libc fall back to clone, whose flags are checked.
		{[]sysno{{"clone3", unix.SYS_CLONE3}}, retErrno(unix.ENOSYS)},
		{slices.Concat(deniedSyscalls, archDeniedSyscalls, []sysno{{"unshare", unix.SYS_UNSHARE}, {"setns", unix.SYS_SETNS}}), retErrno(unix.EPERM)},
	}
	for _, st := range steps {
		if err := add(st.list, st.verdict); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// verdictRange is a run of consecutive syscall numbers with one verdict.
type verdictRange struct{ lo, hi, verdict uint32 }

// verdictRanges sorts the table and merges neighbours with one verdict.
func verdictRanges(fixed map[uint32]uint32) []verdictRange {
	nrs := make([]uint32, 0, len(fixed))
	for nr := range fixed {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	var out []verdictRange
	for _, nr := range nrs {
		v := fixed[nr]
		if n := len(out); n > 0 && out[n-1].hi+1 == nr && out[n-1].verdict == v {
			out[n-1].hi = nr
			continue
		}
		out = append(out, verdictRange{nr, nr, v})
	}
	return out
}

// search emits a binary search over sorted ranges, with the accumulator
// holding nr. Inner nodes use an unconditional jump for the far side, so
// no conditional offset exceeds one; leaves test a few ranges in a row and
// end in retDefault.
func search(rs []verdictRange) []bpf.Instruction {
	if len(rs) <= 3 {
		var out []bpf.Instruction
		for _, r := range rs {
			if r.lo == r.hi {
				out = append(out,
					bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: r.lo, SkipTrue: 1},
					bpf.RetConstant{Val: r.verdict})
				continue
			}
			out = append(out,
				bpf.JumpIf{Cond: bpf.JumpLessThan, Val: r.lo, SkipTrue: 2},
				bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: r.hi, SkipTrue: 1},
				bpf.RetConstant{Val: r.verdict})
		}
		return append(out, bpf.RetConstant{Val: retDefault})
	}
	mid := len(rs) / 2
	low, high := search(rs[:mid]), search(rs[mid:])
	out := []bpf.Instruction{
		// nr >= the middle range's start: take the jump to the high half.
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: rs[mid].lo, SkipFalse: 1},
		bpf.Jump{Skip: uint32(len(low))},
	}
	out = append(out, low...)
	return append(out, high...)
}

// builder accumulates the per-syscall blocks and the first error.
type builder struct {
	prog []bpf.Instruction
	seen map[uint32]string // nr -> name, to catch a syscall handled twice
	err  error
}

// syscall appends a block that runs body when nr matches s. body must end
// in a return so that the accumulator is only clobbered on paths that
// leave the program.
func (b *builder) syscall(s sysno, body ...bpf.Instruction) {
	if b.err != nil {
		return
	}
	if prev, dup := b.seen[s.nr]; dup {
		b.err = fmt.Errorf("seccomp: syscall %d handled twice (%s, %s)", s.nr, prev, s.name)
		return
	}
	b.seen[s.nr] = s.name
	if len(body) == 0 || len(body) > maxSkip {
		b.err = fmt.Errorf("seccomp: block for %s has %d instructions (want 1..%d)", s.name, len(body), maxSkip)
		return
	}
	if _, ok := body[len(body)-1].(bpf.RetConstant); !ok {
		b.err = fmt.Errorf("seccomp: block for %s does not end in a return", s.name)
		return
	}
	b.prog = append(b.prog, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: s.nr, SkipTrue: uint8(len(body))})
	b.prog = append(b.prog, body...)
}

// argIn returns a block body that loads the low 32 bits of args[arg] and
// returns match if it equals one of values, otherwise noMatch:
//
//	ld  args[arg].lo
//	jeq values[0], match   ; one per value
//	...
//	ret noMatch
//	match: ret match
func argIn(arg uint32, values []uint32, match, noMatch uint32) []bpf.Instruction {
	if len(values) == 0 {
		return []bpf.Instruction{bpf.RetConstant{Val: noMatch}}
	}
	body := []bpf.Instruction{bpf.LoadAbsolute{Off: argLow(arg), Size: 4}}
	for i, v := range values {
		// Skip the remaining comparisons and the noMatch return.
		body = append(body, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(len(values) - i)})
	}
	return append(body,
		bpf.RetConstant{Val: noMatch},
		bpf.RetConstant{Val: match},
	)
}

// familyIn allows a socket of the given families (args[0]); AF_NETLINK,
// when it is not among them, fails with EAFNOSUPPORT, as on a kernel
// without netlink, so that a program probing it (useradd's audit socket)
// carries on as there; any other family fails with EPERM.
func familyIn(families []uint32) []bpf.Instruction {
	n := len(families)
	body := []bpf.Instruction{bpf.LoadAbsolute{Off: argLow(0), Size: 4}}
	for i, f := range families {
		// Past the other families, the netlink test and both refusals.
		body = append(body, bpf.JumpIf{Cond: bpf.JumpEqual, Val: f, SkipTrue: uint8(n - i + 2)})
	}
	body = append(body,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_NETLINK, SkipTrue: 1},
		bpf.RetConstant{Val: retErrno(unix.EPERM)},
		bpf.RetConstant{Val: retErrno(unix.EAFNOSUPPORT)},
	)
	if n > 0 {
		body = append(body, bpf.RetConstant{Val: retAllow})
	}
	return body
}

// socketFamilies validates and deduplicates the allowed families, applying
// the default for nil. The range check keeps the socket blocks short and
// rejects values the kernel would refuse anyway.
func socketFamilies(fams []int) ([]uint32, error) {
	if fams == nil {
		fams = defaultSocketFamilies
	}
	out := make([]uint32, 0, len(fams))
	for _, f := range fams {
		if f < 0 || f >= unix.AF_MAX {
			return nil, fmt.Errorf("seccomp: invalid socket family %d (want 0..%d)", f, unix.AF_MAX-1)
		}
		if !slices.Contains(out, uint32(f)) {
			out = append(out, uint32(f))
		}
	}
	return out, nil
}

// Install loads prog as a seccomp filter for every thread of the calling
// process (SECCOMP_FILTER_FLAG_TSYNC). The filter is inherited by children
// and survives execve; it cannot be removed.
//
// The caller must already have set no_new_privs (prctl
// PR_SET_NO_NEW_PRIVS) on the calling OS thread, e.g. after
// runtime.LockOSThread; Install refuses to proceed otherwise rather than
// relying on CAP_SYS_ADMIN to waive the kernel's own check. TSYNC then
// propagates no_new_privs to the other threads together with the filter.
func Install(prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > bpfMaxInsns {
		return fmt.Errorf("seccomp: filter has %d instructions (want 1..%d)", len(prog), bpfMaxInsns)
	}

	// The no_new_privs check and the seccomp call must happen on the same
	// thread, since no_new_privs is a per-thread attribute.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("seccomp: read no_new_privs: %w", err)
	}
	if nnp != 1 {
		return errors.New("seccomp: no_new_privs is not set on the calling thread (prctl PR_SET_NO_NEW_PRIVS)")
	}

	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP,
		unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	if r != 0 {
		// With TSYNC a positive return value is the id of a thread whose
		// seccomp state could not be synchronised; nothing was installed.
		return fmt.Errorf("seccomp: install filter: TSYNC failed, thread %d has an incompatible seccomp filter", r)
	}
	return nil
}

// Lists returns the syscalls the filter allows and denies (EPERM) whatever
// their arguments, by number, for tests and reports; the ones with argument
// rules (clone, socket, socketpair, ioctl, personality, memfd_create) are
// in neither, and everything else fails with ENOSYS.
func Lists() (allowed, denied map[string]int) {
	allowed, denied = map[string]int{}, map[string]int{}
	for _, s := range slices.Concat(allowedSyscalls, archAllowedSyscalls) {
		allowed[s.name] = int(s.nr)
	}
	for _, s := range slices.Concat(deniedSyscalls, archDeniedSyscalls, []sysno{{"unshare", unix.SYS_UNSHARE}, {"setns", unix.SYS_SETNS}}) {
		denied[s.name] = int(s.nr)
	}
	return allowed, denied
}
