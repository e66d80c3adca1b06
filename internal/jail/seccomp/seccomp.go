// Package seccomp builds and installs the seccomp-BPF filter that confines
// the Python code sandbox.
//
// The sandbox already runs untrusted code inside fresh user, PID, mount and
// network namespaces, without capabilities and under Landlock; this filter
// bounds the kernel surface it reaches. It is an allow-list: a syscall on
// no list fails with ENOSYS, so whatever a newer kernel adds stays out of
// reach until someone reviews it here (allow_linux.go lists the groups and
// why each is there).
//
// The program checks, in order:
//
//  1. The audit architecture must be the native one, otherwise the process
//     is killed. Syscall numbers are only meaningful per ABI, so a foreign
//     ABI (for example int 0x80 i386 calls on x86_64) would bypass every
//     later rule.
//  2. On x86_64, syscall numbers with the x32 bit (0x40000000) set kill the
//     process for the same reason.
//  3. clone with any CLONE_NEW* namespace flag fails with EPERM; ordinary
//     fork and thread creation are allowed.
//  4. socket and socketpair fail with EPERM unless the address family is
//     in [Options.AllowedSocketFamilies]; AF_NETLINK with EAFNOSUPPORT, as
//     on a kernel without it (useradd then skips its audit socket).
//  5. ioctl TIOCSTI and TIOCLINUX fail with EPERM (terminal input injection).
//  6. personality is allowed only for PER_LINUX (0) and the query value
//     0xffffffff, so ADDR_NO_RANDOMIZE and friends cannot be set.
//  7. memfd_create fails with EPERM unless it asks for MFD_NOEXEC_SEAL
//     (Linux 6.3+): an executable memfd would run any program through
//     /proc/self/fd/N or execveat, past Landlock and noexec mounts, which
//     only see files with a path. A sealed one can never gain an exec bit.
//  8. A binary search over every other syscall with a fixed verdict:
//     the allow-list; clone3 fails with ENOSYS (its flags live in user
//     memory that BPF cannot inspect, and libc falls back to clone); a
//     fixed list of dangerous syscalls (ptrace, the mount API, unshare,
//     setns, keyrings, bpf, perf_event_open, io_uring, module loading,
//     clock setting, ...) fails with EPERM, which callers expect of a
//     forbidden operation.
//  9. Everything else fails with ENOSYS: inotify and fanotify marks among
//     them (a watch on the shared read-only /usr would show the host's and
//     other tenants' file activity), sync and syncfs (they flush the host's
//     disks), and every syscall added after this list was written.
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
