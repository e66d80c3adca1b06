// Command seccomp-profile writes deploy/seccomp/codecage.json, the
// Localhost seccomp profile of the chart's baseline tier: containerd's
// RuntimeDefault for a container holding exactly the tier's capabilities,
// plus the system calls codecage's supervisor needs to build a sandbox
// (namespaces, mounts, pivot_root) unconditionally. RuntimeDefault allows
// those only to a container with CAP_SYS_ADMIN, which this tier never has:
// codecage makes them inside user namespaces of its own.
// scripts/e2e-k8s.sh runs the baseline tier under a copy that logs
// (SCMP_ACT_LOG) what this one would refuse, and fails on any call logged:
// that is how the list was recorded, and how it stays true.
//
//	go run . > ../../deploy/seccomp/codecage.json
package main

import (
	"encoding/json"
	"os"
	"slices"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// capabilities are the baseline tier's (values-baseline.yaml).
var capabilities = []string{"CAP_SETUID", "CAP_SETGID", "CAP_SETFCAP", "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE"}

// sandboxCalls build a sandbox: new namespaces (clone, clone3 and unshare
// with namespace flags; setns), its root (mount, the new mount API,
// pivot_root, chroot) and its names (sethostname, setdomainname).
var sandboxCalls = []string{
	"clone", "clone3", "unshare", "setns",
	"mount", "umount2", "pivot_root", "chroot",
	"mount_setattr", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
	"sethostname", "setdomainname",
}

// profile is the Docker/containerd JSON form of a Localhost profile; the
// OCI structure's field names are the same.
type profile struct {
	DefaultAction   specs.LinuxSeccompAction `json:"defaultAction"`
	DefaultErrnoRet *uint                    `json:"defaultErrnoRet,omitempty"`
	Architectures   []specs.Arch             `json:"architectures"`
	Syscalls        []specs.LinuxSyscall     `json:"syscalls"`
}

func main() {
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: capabilities, Effective: capabilities, Permitted: capabilities,
	}}}
	def := seccomp.DefaultProfile(spec)
	out := profile{DefaultAction: def.DefaultAction, DefaultErrnoRet: def.DefaultErrnoRet, Architectures: def.Architectures}
	// The sandbox calls leave every rule of RuntimeDefault (conditional
	// allows, clone3's ENOSYS) and get one unconditional allow of their own.
	for _, rule := range def.Syscalls {
		rule.Names = slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool { return slices.Contains(sandboxCalls, n) })
		if len(rule.Names) > 0 {
			out.Syscalls = append(out.Syscalls, rule)
		}
	}
	out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: sandboxCalls, Action: specs.ActAllow})
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		os.Exit(1)
	}
}
