package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// doctorCmd reports every isolation layer and fails if a required one is
// missing.
func doctorCmd(args []string, stdout, stderr io.Writer) int {
	h := jail.ProbeHost()
	ok := true
	line := func(status, name, detail string) {
		fmt.Fprintf(stdout, "%-5s %-18s %s\n", status, name, detail)
	}
	if h.UserNamespaces == nil {
		line("ok", "user namespaces", "new user, pid, mount, net, ipc, uts and cgroup namespaces")
	} else {
		ok = false
		line("FAIL", "user namespaces", h.UserNamespaces.Error()+" (required)")
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
		line("warn", "cgroups", h.CgroupReason()+" (optional: rlimits replace them)")
	default:
		line("ok", "cgroups", fmt.Sprintf("v%d: memory, pids, cpu accounting", v))
	}
	mode := "root: one host uid per sandbox"
	if h.Rootless {
		mode = "rootless: the sandbox runs as your uid"
	}
	line("info", "mode", mode)
	out, err := exec.Command(runtime.DefaultInterpreter, "-I", "-c", "import sys; print(sys.version.split()[0])").Output()
	if err != nil {
		ok = false
		line("FAIL", "interpreter", runtime.DefaultInterpreter+": "+err.Error()+" (required)")
	} else {
		line("ok", "interpreter", runtime.DefaultInterpreter+" "+strings.TrimSpace(string(out)))
	}
	// gVisor is the optional second backend, required only when it is the
	// default (SANDBOX_ISOLATION=gvisor).
	gv := gvisor.Probe(gvisor.Runtime{Runsc: os.Getenv("SANDBOX_RUNSC"), Platform: os.Getenv("SANDBOX_GVISOR_PLATFORM")})
	switch {
	case gv.Available:
		line("ok", "gvisor", fmt.Sprintf("%s, platform %s, a sandbox in %.2f s (use_container, SANDBOX_ISOLATION=gvisor)", gv.Version, gv.Platform, gv.StartupSeconds))
	case os.Getenv("SANDBOX_ISOLATION") == "gvisor":
		ok = false
		line("FAIL", "gvisor", gv.Error+" (required: SANDBOX_ISOLATION=gvisor)")
	default:
		line("warn", "gvisor", gv.Error+" (optional: use_container is unavailable)")
	}
	if !ok {
		fmt.Fprintln(stderr, "codecage doctor: a required isolation layer is missing; codecage refuses to run code here")
		return exitFailure
	}
	return exitOK
}
