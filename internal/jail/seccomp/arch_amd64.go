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

// ociArch names the native architecture in an OCI seccomp section.
const ociArch = "SCMP_ARCH_X86_64"
