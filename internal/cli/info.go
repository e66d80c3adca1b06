package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// infoCmd prints the server's capabilities: profiles, limits, isolation.
func infoCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the get_sandbox_info object")
	cf := addConfigFlags(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	oneShot(cf)
	svc, code := newService(cf, stderr, "info")
	if svc == nil {
		return code
	}
	defer svc.Close()
	info := svc.Info()
	if *asJSON {
		printJSON(stdout, info)
		return exitOK
	}
	fmt.Fprintln(stdout, "Profiles:")
	for _, name := range []string{"basic", "data_science", "network", "filesystem"} {
		p := info.SecurityProfiles[name]
		state := "enabled"
		if !p.Enabled {
			state = "disabled (" + p.Setting + "=true enables it)"
		}
		fmt.Fprintf(stdout, "  %-13s %s\n  %13s %s\n", name, state, "", strings.Join(p.Modules, " "))
	}
	fmt.Fprintf(stdout, "  A request that names no profile gets: %s\n", strings.Join(info.DefaultProfiles, ", "))
	l := info.ResourceLimits
	fmt.Fprintf(stdout, "Limits:\n  timeout %gs (max %gs), CPU %gs (max %gs), memory %s (data_science %s, max %s)\n",
		l.Timeout, l.MaxTimeout, l.CPUTime, l.MaxCPUTime, l.MemoryLimit, l.DataMemoryLimit, l.MaxMemoryLimit)
	fmt.Fprintf(stdout, "  output %d bytes per stream, %d processes, files up to %d bytes, %d open files, /tmp %d bytes, workspace %d bytes\n",
		l.MaxOutputSize, l.MaxProcesses, l.MaxFileSize, l.MaxOpenFiles, l.TmpSize, l.WorkspaceSize)
	iso := info.Isolation
	fmt.Fprintf(stdout, "Isolation: backend %s, cgroup %s, Landlock ABI %d, seccomp %v, rootless %v; Python %s (%s)\n",
		iso.Backend, iso.Cgroup, iso.LandlockABI, iso.Seccomp, iso.Rootless, iso.PythonVersion, iso.Interpreter)
	for _, w := range iso.Warnings {
		fmt.Fprintln(stdout, "  warning:", w)
	}
	if cm := info.ContainerMode; cm.Enabled || cm.Available {
		gv := cm.GVisor
		if gv.Available {
			fmt.Fprintf(stdout, "gVisor: %s (%s), platform %s; use_container enabled %v\n", gv.Version, gv.Runsc, gv.Platform, cm.Enabled)
		} else {
			fmt.Fprintf(stdout, "gVisor: unavailable: %s\n", gv.Error)
		}
	}
	if info.Network.Enabled {
		fmt.Fprintf(stdout, "Network: egress proxy to %s\n", strings.Join(info.Network.Allow, ", "))
	}
	return exitOK
}
