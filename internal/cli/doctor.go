package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
)

// doctorCmd reports every isolation layer and fails if a required one is
// missing.
func doctorCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	cfg, err := cf.load()
	if err != nil {
		fmt.Fprintln(stderr, "codecage doctor:", err)
		return exitUsage
	}
	line := func(status, name, detail string) {
		fmt.Fprintf(stdout, "%-5s %-18s %s\n", status, name, detail)
	}
	// Every check runs and prints, even after a required one failed.
	h := fleet.ProbeHost()
	ok := checkPrivileges(cfg, h, line)
	ok = checkHost(h, line) && ok
	ok = checkInterpreter(line) && ok
	ok = checkGVisor(cfg, line) && ok
	if !ok {
		fmt.Fprintln(stderr, "codecage doctor: a required isolation layer is missing; codecage refuses to run code here")
		return exitFailure
	}
	return exitOK
}

// doctorLine prints one line of the report: status, layer, detail.
type doctorLine func(status, name, detail string)

// checkHost reports the kernel's isolation layers, a sandbox built from
// them, and the uid mode; it is false when a required one is missing.
func checkHost(h fleet.Host, line doctorLine) bool {
	ok := true
	if h.UserNamespaces == nil {
		line("ok", "user namespaces", "new user, pid, mount, net, ipc, uts and cgroup namespaces")
	} else {
		ok = false
		line("FAIL", "user namespaces", h.UserNamespaces.Error()+userNSHint()+" (required)")
	}
	if h.Seccomp == nil {
		line("ok", "seccomp", "filter mode")
	} else {
		ok = false
		line("FAIL", "seccomp", h.Seccomp.Error()+" (required)")
	}
	if h.LandlockABI > 0 {
		line("ok", "landlock", fmt.Sprintf("ABI %d", h.LandlockABI))
	} else {
		line("warn", "landlock", "unavailable (optional: mounts still confine files)")
	}
	switch v := h.CgroupVersion(); v {
	case 0:
		line("warn", "cgroups", h.CgroupReason()+cgroupHint(h.CgroupReason())+" (optional: rlimits replace them)")
	default:
		line("ok", "cgroups", fmt.Sprintf("v%d: memory, pids, cpu accounting", v))
	}
	// The layers above can each be present while a sandbox still cannot be
	// built (a container's masked /proc, its read-only /proc/sys, an LSM
	// denying mounts): only building one tells.
	if h.Usable() == nil {
		if err := fleet.ProbeSandbox(); err != nil {
			ok = false
			line("FAIL", "sandbox", err.Error()+sandboxHint(err.Error())+" (required)")
		} else {
			line("ok", "sandbox", "/bin/true ran in a sandbox: own /proc, read-only root, Landlock, seccomp")
		}
	}
	if os.Geteuid() == 0 && !fleet.HasCapability(fleet.CapSysAdmin) {
		line("warn", "workspaces", "no CAP_SYS_ADMIN here (as in a container): session workspaces are plain directories under SANDBOX_STATE_DIR, their size checked by the file API and RLIMIT_FSIZE per file, not capped by a tmpfs (give the container an emptyDir with a sizeLimit)")
	}
	uidBase, uidCount, uidLeases := fleet.UIDSpan()
	mode := fmt.Sprintf("root: one host uid per sandbox and per zygote cell, from %d (%d of them), leased host-wide in blocks under %s", uidBase, uidCount, uidLeases)
	if h.Rootless {
		mode = "rootless: the sandbox runs as your uid"
	}
	line("info", "mode", mode)
	return ok
}

// checkInterpreter reports the Python the sandboxes run; it is required.
func checkInterpreter(line doctorLine) bool {
	ok := true
	out, err := exec.Command(fleet.DefaultInterpreter, "-I", "-c", "import sys; print(sys.version.split()[0])").Output()
	if err != nil {
		ok = false
		line("FAIL", "interpreter", fleet.DefaultInterpreter+": "+err.Error()+" (required)")
	} else {
		line("ok", "interpreter", fleet.DefaultInterpreter+" "+strings.TrimSpace(string(out)))
	}
	return ok
}

// checkGVisor reports gVisor, the optional second backend, required only
// when it is the default (SANDBOX_ISOLATION=gvisor).
func checkGVisor(cfg config.Config, line doctorLine) bool {
	ok := true
	gv := fleet.ProbeGVisor(cfg.Runsc, cfg.GVisorPlatform)
	switch {
	case gv.Available:
		detail := fmt.Sprintf("%s (%s), platform %s of %s, a sandbox in %.2f s (use_container, SANDBOX_ISOLATION=gvisor)",
			gv.Version, gv.Runsc, gv.Platform, strings.Join(gv.Platforms, ", "), gv.StartupSeconds)
		if gv.EnforcesNoexec {
			detail += "; refuses code from noexec mounts: a gVisor session's commands run under it"
		} else {
			detail += "; maps code from noexec mounts: a gVisor session's commands run in the native command jail"
		}
		if gv.PlatformNote != "" {
			detail += "; " + gv.PlatformNote
		}
		line("ok", "gvisor", detail)
	case cfg.Isolation == config.IsolationGVisor:
		ok = false
		line("FAIL", "gvisor", gv.Error+" (required: SANDBOX_ISOLATION=gvisor)")
	default:
		line("warn", "gvisor", gv.Error+" (optional: use_container is unavailable)")
	}
	return ok
}

// The container settings that lift each restriction, as Docker (and
// Podman) and Kubernetes spell them (docs/deploy.md).
const (
	fixSeccomp  = "run the container with --security-opt seccomp=unconfined (Kubernetes: securityContext.seccompProfile.type: Unconfined)"
	fixProc     = "run the container with --security-opt systempaths=unconfined (Podman: --security-opt unmask=ALL; Kubernetes: securityContext.procMount: Unmasked)"
	fixAppArmor = "run the container with --security-opt apparmor=unconfined (Kubernetes: securityContext.appArmorProfile.type: Unconfined)"
)

// userNSHint explains a failed user namespace when this process already
// runs under a seccomp filter (a container's profile) or an AppArmor
// profile, which refuse new namespaces whatever the kernel allows.
func userNSHint() string {
	switch {
	case len(missingCapabilities(fleet.ProbeHost())) > 0:
		return ": this process lacks capabilities (see the capabilities line)"
	case seccompFiltered():
		return ": this process already runs under a seccomp filter, such as a container's default profile, which refuses clone3 and new namespaces; " + fixSeccomp
	case appArmorProfile() != "":
		return ": this process is confined by AppArmor (" + appArmorProfile() + "), which may refuse new namespaces; " + fixAppArmor
	}
	return ""
}

// sandboxHint says which setting lifts a failed sandbox build.
func sandboxHint(msg string) string {
	switch {
	case strings.Contains(msg, "operation not permitted") && len(missingCapabilities(fleet.ProbeHost())) > 0:
		return ": this process lacks capabilities (see the capabilities line)"
	case strings.Contains(msg, "mount /proc: operation not permitted"):
		hint := ": the kernel lets a new pid namespace mount its own /proc only while a /proc with nothing mounted over it is visible"
		if masked := procOvermounts(); len(masked) > 0 {
			if len(masked) > 4 {
				masked = append(masked[:4], "...")
			}
			hint += ", and here /proc has paths masked (" + strings.Join(masked, ", ") + "), as container runtimes do by default"
		}
		return hint + "; " + fixProc
	case strings.Contains(msg, "max_user_namespaces") && strings.Contains(msg, "read-only file system"):
		return ": /proc/sys is read-only, as container runtimes mount it by default, so a sandbox cannot forbid nested user namespaces; " + fixProc
	case strings.Contains(msg, "permission denied") && appArmorProfile() != "":
		return ": this process is confined by AppArmor (" + appArmorProfile() + "), whose container profile denies mount; " + fixAppArmor
	case strings.Contains(msg, "operation not permitted") && seccompFiltered():
		return ": this process runs under a seccomp filter, such as a container's default profile; " + fixSeccomp
	}
	return ""
}

// cgroupHint explains a read-only cgroup mount, the container default,
// where the reason does not already.
func cgroupHint(reason string) string {
	if strings.Contains(reason, "read-only file system") && !strings.Contains(reason, "cgroup_writable") {
		return "; /sys/fs/cgroup is read-only, as container runtimes mount it without --privileged"
	}
	return ""
}

// seccompFiltered reports whether this process already runs under a
// seccomp filter (Seccomp: 2 in /proc/self/status).
func seccompFiltered() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			return strings.TrimSpace(v) == "2"
		}
	}
	return false
}

// appArmorProfile is the AppArmor profile confining this process, or "".
func appArmorProfile() string {
	for _, p := range []string{"/proc/self/attr/apparmor/current", "/proc/self/attr/current"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
		if v == "" || v == "unconfined" || strings.HasPrefix(v, "unconfined ") {
			return ""
		}
		// SELinux answers in attr/current too; AppArmor's is "name (mode)".
		if strings.Contains(p, "apparmor") || strings.HasSuffix(v, ")") {
			return v
		}
	}
	return ""
}

// procOvermounts lists the mounts on top of /proc: a container runtime's
// masked and read-only paths.
func procOvermounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], "/proc/") {
			out = append(out, f[4])
		}
	}
	return out
}
