//go:build linux

package seccomp

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// nativeAuditArch is the seccomp_data.arch value of native x86_64 syscalls.
const nativeAuditArch = unix.AUDIT_ARCH_X86_64

// x32SyscallBit marks x32-ABI syscalls. x32 shares AUDIT_ARCH_X86_64, so
// only this bit tells them apart; they must be rejected separately because
// their numbering differs from the native table the rules are written for.
const x32SyscallBit = 0x40000000

// archNrChecks runs with the accumulator holding seccomp_data.nr and must
// leave it unchanged when it falls through.
func archNrChecks() []bpf.Instruction {
	return []bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
		bpf.RetConstant{Val: retKill},
	}
}

// archDeniedSyscalls are denied with EPERM like deniedSyscalls but exist
// only in the x86_64 table (hardware port access, long-removed or never
// implemented entry points kept reserved for compatibility).
var archDeniedSyscalls = []sysno{
	{"iopl", unix.SYS_IOPL},
	{"ioperm", unix.SYS_IOPERM},
	{"create_module", unix.SYS_CREATE_MODULE},
	{"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS},
	{"query_module", unix.SYS_QUERY_MODULE},
	{"afs_syscall", unix.SYS_AFS_SYSCALL},
	{"tuxcall", unix.SYS_TUXCALL},
	{"security", unix.SYS_SECURITY},
	{"vserver", unix.SYS_VSERVER},
	{"uselib", unix.SYS_USELIB},
	{"ustat", unix.SYS_USTAT},
	{"sysfs", unix.SYS_SYSFS},
	{"_sysctl", unix.SYS__SYSCTL},
}

// archAllowedSyscalls are x86_64's legacy entry points, which libc and
// static binaries still call; each is an older form of an allowed *at or
// *2 syscall (arm64 only has those).
var archAllowedSyscalls = []sysno{
	{"open", unix.SYS_OPEN},
	{"creat", unix.SYS_CREAT},
	{"stat", unix.SYS_STAT},
	{"lstat", unix.SYS_LSTAT},
	{"access", unix.SYS_ACCESS},
	{"readlink", unix.SYS_READLINK},
	{"mkdir", unix.SYS_MKDIR},
	{"rmdir", unix.SYS_RMDIR},
	{"unlink", unix.SYS_UNLINK},
	{"rename", unix.SYS_RENAME},
	{"link", unix.SYS_LINK},
	{"symlink", unix.SYS_SYMLINK},
	{"chmod", unix.SYS_CHMOD},
	{"chown", unix.SYS_CHOWN},
	{"lchown", unix.SYS_LCHOWN},
	{"mknod", unix.SYS_MKNOD},
	{"utime", unix.SYS_UTIME},
	{"utimes", unix.SYS_UTIMES},
	{"getdents", unix.SYS_GETDENTS},
	{"dup2", unix.SYS_DUP2},
	{"pipe", unix.SYS_PIPE},
	{"poll", unix.SYS_POLL},
	{"select", unix.SYS_SELECT},
	{"epoll_create", unix.SYS_EPOLL_CREATE},
	{"epoll_wait", unix.SYS_EPOLL_WAIT},
	{"eventfd", unix.SYS_EVENTFD},
	{"signalfd", unix.SYS_SIGNALFD},
	{"fork", unix.SYS_FORK},
	{"vfork", unix.SYS_VFORK},
	{"pause", unix.SYS_PAUSE},
	{"alarm", unix.SYS_ALARM},
	{"time", unix.SYS_TIME},
	{"getpgrp", unix.SYS_GETPGRP},
	{"arch_prctl", unix.SYS_ARCH_PRCTL}, // thread-local storage
}

// fstatatNr is fstatat, which x86_64 calls newfstatat.
const fstatatNr = unix.SYS_NEWFSTATAT

// ociArch names the native architecture in an OCI seccomp section.
const ociArch = "SCMP_ARCH_X86_64"
