//go:build linux && (amd64 || arm64)

package seccomp

import (
	"slices"

	"golang.org/x/sys/unix"
)

// OCI is the filter as an OCI runtime-spec seccomp section, for a runtime
// that applies it itself: gVisor's runsc (--oci-seccomp) installs it in
// its own kernel, in front of the program. It carries the same rules as
// [Build], written the way runsc reads them: each rule tests one argument
// once (a rule with two tests of one argument does not do what it says
// there), so a set is spelled as one rule per member. Three rules differ:
// clone3 is left to runsc (see below),
// personality is not restricted (runsc's personality ignores the flags
// that matter), and mknod of device nodes is refused, which runsc allows
// without CAP_MKNOD.
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
	eperm := uint(unix.EPERM)
	deny := func(names []string, args ...OCIArg) OCIRule {
		return OCIRule{Names: names, Action: "SCMP_ACT_ERRNO", ErrnoRet: &eperm, Args: args}
	}
	masked := func(index uint, mask, value uint64) OCIArg {
		return OCIArg{Index: index, Value: mask, ValueTwo: value, Op: "SCMP_CMP_MASKED_EQ"}
	}
	var names []string
	for _, s := range slices.Concat(deniedSyscalls, archDeniedSyscalls) {
		names = append(names, s.name)
	}
	p := &OCI{DefaultAction: "SCMP_ACT_ALLOW", Architectures: []string{ociArch}, Syscalls: []OCIRule{
		deny(append(names, "unshare", "setns")),
	}}
	// No clone3 rule: runsc (2022) has no clone3 of its own (ENOSYS, so
	// libc falls back to clone, whose flags are checked) and ignores
	// errnoRet, so the jail's ENOSYS rule would become EPERM, on which
	// libc does not fall back: no thread could start.
	for bit := uint64(1); bit < 1<<32; bit <<= 1 {
		if namespaceCloneFlags&bit != 0 {
			p.Syscalls = append(p.Syscalls, deny([]string{"clone"}, masked(0, bit, bit)))
		}
	}
	// Families are small numbers: refuse each one below the largest
	// allowed that is not allowed, and everything above it.
	top := uint32(0)
	for _, f := range families {
		top = max(top, f)
	}
	for f := uint32(0); f <= top; f++ {
		if !slices.Contains(families, f) {
			p.Syscalls = append(p.Syscalls, deny([]string{"socket", "socketpair"}, masked(0, 0xffffffff, uint64(f))))
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
	return p, nil
}
