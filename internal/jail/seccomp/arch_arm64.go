//go:build linux

package seccomp

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// nativeAuditArch is the seccomp_data.arch value of native AArch64 syscalls.
// AArch32 compat syscalls report AUDIT_ARCH_ARM and are killed by rule 1.
const nativeAuditArch = unix.AUDIT_ARCH_AARCH64

// archNrChecks runs with the accumulator holding seccomp_data.nr and must
// leave it unchanged when it falls through. arm64 has no second ABI that
// shares its audit arch, so there is nothing to check.
func archNrChecks() []bpf.Instruction { return nil }

// archDeniedSyscalls is empty: the legacy syscalls denied on x86_64 (iopl,
// uselib, _sysctl, ...) never existed in the arm64 table.
var archDeniedSyscalls = []sysno{}

// archAllowedSyscalls is empty: arm64 only has the *at and *2 forms.
var archAllowedSyscalls = []sysno{}

// fstatatNr is fstatat (the kernel's newfstatat).
const fstatatNr = unix.SYS_FSTATAT

// ociArch names the native architecture in an OCI seccomp section.
const ociArch = "SCMP_ARCH_AARCH64"
