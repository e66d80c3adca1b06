// Package seccomp builds and installs the seccomp-BPF filter that confines
// the Python code sandbox.
//
// The sandbox already runs untrusted code inside fresh user, PID, mount and
// network namespaces; this filter is one more layer. It is a deny-list
// (default allow): blocking only known-dangerous kernel surface keeps the
// interpreter and its native extensions (numpy etc.) working without having
// to enumerate every syscall they might make.
//
// The program checks, in order:
//
//  1. The audit architecture must be the native one, otherwise the process
//     is killed. Syscall numbers are only meaningful per ABI, so a foreign
//     ABI (for example int 0x80 i386 calls on x86_64) would bypass every
//     later rule.
//  2. On x86_64, syscall numbers with the x32 bit (0x40000000) set kill the
//     process for the same reason.
//  3. clone3 fails with ENOSYS: its flags live in user memory that BPF
//     cannot inspect, and libc falls back to clone on ENOSYS.
//  4. clone with any CLONE_NEW* namespace flag fails with EPERM; ordinary
//     fork and thread creation are allowed.
//  5. unshare and setns always fail with EPERM.
//  6. socket and socketpair fail with EPERM unless the address family is
//     in [Options.AllowedSocketFamilies].
//  7. ioctl TIOCSTI and TIOCLINUX fail with EPERM (terminal input injection).
//  8. A fixed list of syscalls (ptrace, mount API, keyrings, bpf,
//     perf_event_open, io_uring, module loading, clock setting, ...) fails
//     with EPERM.
//  9. personality is allowed only for PER_LINUX (0) and the query value
//     0xffffffff, so ADDR_NO_RANDOMIZE and friends cannot be set.
//  10. Everything else is allowed.
//
// Argument checks compare only the low 32 bits of an argument: the kernel
// truncates these arguments to int/unsigned int itself, so the high bits
// cannot change its interpretation and must not be allowed to dodge a rule.
//
// Build and Install are implemented for linux/amd64 and linux/arm64; on
// other platforms they return an error.
package seccomp

// Options selects filter variants. The zero value is the sandbox default.
type Options struct {
	// AllowedSocketFamilies lists the address families (AF_* values) that
	// socket(2) and socketpair(2) may use; any other family fails with
	// EPERM. Nil means AF_UNIX, AF_INET and AF_INET6. A non-nil empty
	// slice forbids creating sockets altogether.
	AllowedSocketFamilies []int
}
