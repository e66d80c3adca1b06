//go:build linux && (amd64 || arm64)

package seccomp

import (
	"slices"

	"golang.org/x/sys/unix"
)

// OCI is the filter as an OCI runtime-spec seccomp section, for a runtime
// that applies it itself: gVisor's runsc (--oci-seccomp) installs it in
// its own kernel, in front of the program. It is the same allow-list as
// [Build], written the way runsc reads it: the first rule that matches a
// syscall decides (so refusals come before the allow rules), and a rule
// tests each argument once (two tests of one argument mean "either").
// runsc turns every SCMP_ACT_ERRNO into EPERM whatever errnoRet says, so
// the default action is SCMP_ACT_TRACE: with no tracer (and none can
// attach: ptrace is refused) a traced syscall fails with ENOSYS, in gVisor
// as in Linux, and libc falls back (clone3 to clone among them). Where
// runsc still differs:
//   - memfd_create with MFD_NOEXEC_SEAL gets through, but gVisor does not
//     know the flag and answers EINVAL: no memfd can be made there;
//   - personality is not restricted (runsc's personality ignores the flags
//     that matter);
//   - mknod of device nodes is refused, which runsc allows without
//     CAP_MKNOD.
type OCI struct {
	DefaultAction string    `json:"defaultAction"`
	Architectures []string  `json:"architectures"`
	Syscalls      []OCIRule `json:"syscalls"`
}

// OCIRule applies Action to the syscalls Names when every Args test holds.
type OCIRule struct {
	Names    []string `json:"names"`
	Action   string   `json:"action"`
	ErrnoRet *uint    `json:"errnoRet,omitempty"`
	Args     []OCIArg `json:"args,omitempty"`
}

// OCIArg tests syscall argument Index: Value Op ValueTwo, as in the spec.
type OCIArg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo,omitempty"`
	Op       string `json:"op"`
}

// BuildOCI returns the OCI form of the filter for opts.
func BuildOCI(opts Options) (*OCI, error) {
	families, err := socketFamilies(opts.AllowedSocketFamilies)
	if err != nil {
		return nil, err
	}
	eperm, noNetlink := uint(unix.EPERM), uint(unix.EAFNOSUPPORT)
	deny := func(names []string, args ...OCIArg) OCIRule {
		return OCIRule{Names: names, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eperm, Args: args}
	}
	masked := func(index uint, mask, value uint64) OCIArg {
		return OCIArg{Index: index, Value: mask, ValueTwo: value, Op: "SCMP_CMP_MASKED_EQ"}
	}
	denied := names(slices.Concat(deniedSyscalls, archDeniedSyscalls))
	denied = append(denied, "unshare", "setns")
	allowed := names(slices.Concat(allowedSyscalls, archAllowedSyscalls))
	allowed = append(allowed, "clone", "socket", "socketpair", "ioctl", "personality")
	// runsc looks names up in its own table and skips a name it lacks;
	// gVisor releases before 2023 call pselect6 "pselect".
	allowed = append(allowed, "pselect")
	p := &OCI{DefaultAction: "SCMP_ACT_TRACE", Architectures: []string{ociArch},
		Syscalls: []OCIRule{deny(denied)}}
	for bit := uint64(1); bit < 1<<32; bit <<= 1 {
		if namespaceCloneFlags&bit != 0 {
			p.Syscalls = append(p.Syscalls, deny([]string{"clone"}, masked(0, bit, bit)))
		}
	}
	// runsc answers every refusal here with EPERM, whatever errnoRet says,
	// and useradd aborts on that from its audit socket: an audit netlink
	// socket is let through to gVisor's kernel, which has no audit and
	// answers EPROTONOSUPPORT itself (rules match in order; no new
	// surface: the socket can never be made).
	p.Syscalls = append(p.Syscalls, OCIRule{Names: []string{"socket"}, Action: "SCMP_ACT_ALLOW",
		Args: []OCIArg{masked(0, 0xffffffff, unix.AF_NETLINK), masked(2, 0xffffffff, unix.NETLINK_AUDIT)}})
	// Families are small numbers: refuse each one up to the largest
	// allowed (or AF_NETLINK) that is not allowed, and everything above
	// it; AF_NETLINK with EAFNOSUPPORT, as familyIn does.
	top := uint32(unix.AF_NETLINK)
	for _, f := range families {
		top = max(top, f)
	}
	for f := uint32(0); f <= top; f++ {
		if !slices.Contains(families, f) {
			rule := deny([]string{"socket", "socketpair"}, masked(0, 0xffffffff, uint64(f)))
			if f == unix.AF_NETLINK {
				rule.ErrnoRet = &noNetlink
			}
			p.Syscalls = append(p.Syscalls, rule)
		}
	}
	p.Syscalls = append(p.Syscalls, deny([]string{"socket", "socketpair"}, OCIArg{Index: 0, Value: uint64(top), Op: "SCMP_CMP_GT"}))
	for _, req := range []uint64{unix.TIOCSTI, unix.TIOCLINUX} {
		p.Syscalls = append(p.Syscalls, deny([]string{"ioctl"}, masked(1, 0xffffffff, req)))
	}
	for _, kind := range []uint64{unix.S_IFCHR, unix.S_IFBLK} {
		p.Syscalls = append(p.Syscalls,
			deny([]string{"mknod"}, masked(1, unix.S_IFMT, kind)),
			deny([]string{"mknodat"}, masked(2, unix.S_IFMT, kind)))
	}
	p.Syscalls = append(p.Syscalls,
		deny([]string{"memfd_create"}, masked(1, mfdNoexecSeal, 0)),
		OCIRule{Names: []string{"memfd_create"}, Action: "SCMP_ACT_ALLOW", Args: []OCIArg{masked(1, mfdNoexecSeal, mfdNoexecSeal)}},
		OCIRule{Names: allowed, Action: "SCMP_ACT_ALLOW"})
	return p, nil
}

func names(list []sysno) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.name
	}
	return out
}
