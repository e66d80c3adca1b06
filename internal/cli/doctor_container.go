package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
)

// rootModeCapabilities are what the supervisor needs as root (docs/deploy.md
// measured them): SETUID, SETGID and SETFCAP write each sandbox's uid map,
// CHOWN, FOWNER and DAC_OVERRIDE hand a session's workspace to its uid.
var rootModeCapabilities = []struct {
	bit  uint
	name string
}{
	{7, "SETUID"}, {6, "SETGID"}, {31, "SETFCAP"}, {0, "CHOWN"}, {3, "FOWNER"}, {1, "DAC_OVERRIDE"},
}

// missingCapabilities lists the root-mode capabilities this process lacks
// (none in rootless mode, which maps only its own uid).
func missingCapabilities(h fleet.Host) []string {
	if h.Rootless {
		return nil
	}
	var out []string
	for _, c := range rootModeCapabilities {
		if !fleet.HasCapability(c.bit) {
			out = append(out, c.name)
		}
	}
	return out
}

// checkPrivileges reports what the container gave this process: its user
// namespace (a pod's hostUsers: false) and its capabilities. It is false
// when one the server needs is missing.
func checkPrivileges(cfg config.Config, h fleet.Host, line doctorLine) bool {
	ok := true
	onHost, desc := fleet.OwnIDMap()
	switch {
	case !onHost:
		line("ok", "own user namespace", desc+" (a container's root is not the host's)")
	case cfg.RequireUserNamespace:
		ok = false
		line("FAIL", "own user namespace", "this process runs on the host's own user ids (uid_map 0 0 4294967295), but SANDBOX_REQUIRE_USER_NAMESPACE says it was given a namespace of its own (the Helm chart's hostUsers: false): the node's runtime ignored it, as containerd before 2.0 does silently; run on nodes with containerd 2.0+ or CRI-O 1.25+ and runc 1.2+ or crun 1.9+ (kubectl get node -o jsonpath='{.status.runtimeHandlers[*].features.userNamespaces}') (required)")
	case os.Geteuid() == 0 && inContainer():
		line("info", "own user namespace", "none: this container's root is the host's root (Kubernetes: hostUsers: false gives it a namespace of its own)")
	}
	if missing := missingCapabilities(h); len(missing) > 0 {
		ok = false
		line("FAIL", "capabilities", "missing CAP_"+strings.Join(missing, ", CAP_")+": as root, codecage needs SETUID, SETGID and SETFCAP to map each sandbox's uid and CHOWN, FOWNER and DAC_OVERRIDE for session workspaces; "+fixCapabilities(missing)+" (required)")
	}
	return ok
}

func fixCapabilities(missing []string) string {
	return fmt.Sprintf("run the container with --cap-add %s (Kubernetes: securityContext.capabilities.add: [%s])",
		strings.Join(missing, ","), strings.Join(missing, ", "))
}

// inContainer guesses whether this process runs in a container: the files
// runtimes leave, or a Kubernetes pod's environment.
func inContainer() bool {
	for _, p := range []string{"/.dockerenv", "/run/.containerenv"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// hostRefusal runs the doctor's checks of this host before a server
// starts, so that a container missing what the jail needs fails at once
// with the doctor's words (a pod in CrashLoopBackOff, its log saying why)
// rather than serving and failing every run. It returns the failed lines,
// or "" when the host can run sandboxes.
func hostRefusal(cfg config.Config) string {
	var failed []string
	line := func(status, name, detail string) {
		if status == "FAIL" {
			failed = append(failed, fmt.Sprintf("%-5s %-18s %s", status, name, detail))
		}
	}
	h := fleet.ProbeHost()
	checkPrivileges(cfg, h, line)
	checkHost(h, line)
	return strings.Join(failed, "\n")
}
