// Package info describes what a server offers (get_sandbox_info, doctor):
// its profiles, limits, backends, network, commands, packages and kernels,
// from its configuration and what the host's probes find. It sits beside
// the root, in the service's layer, because it reads the packages domain's
// layer; the root answers Info with it.
package info

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/packages"
)

// Info describes what this server offers: the seed's get_sandbox_info shape,
// plus the isolation layers in force.
type Info struct {
	Success          bool                   `json:"success"`
	SecurityProfiles map[string]ProfileInfo `json:"security_profiles"`
	// DefaultProfiles are the profiles of a request that names none:
	// every enabled profile unless the operator set SANDBOX_DEFAULT_PROFILES.
	DefaultProfiles []string       `json:"default_profiles"`
	ResourceLimits  ResourceLimits `json:"resource_limits"`
	ContainerMode   ContainerMode  `json:"container_mode"`
	Network         NetworkInfo    `json:"network"`
	// AllowedImports is the operator's override of every profile, or null.
	AllowedImports []string      `json:"allowed_imports_override"`
	Isolation      IsolationInfo `json:"isolation"`
	Commands       CommandsInfo  `json:"commands"`
	Packages       PackagesInfo  `json:"packages"`
	// Kernels are the languages a session's code may run in: python, and
	// those the operator enabled (SANDBOX_KERNELS).
	Kernels []string `json:"kernels"`
}

// PackagesInfo describes pip_install and the operator's package layer.
type PackagesInfo struct {
	// Source is the index pip may reach, or "wheelhouse" when installs
	// come from the operator's local wheelhouse without network.
	Source      string                      `json:"source"`
	MaxDownload int64                       `json:"max_download"`
	MaxInstall  int64                       `json:"max_install"`
	Blocked     []string                    `json:"blocked"`
	Layer       []packages.InstalledPackage `json:"layer"`
}

// CommandsInfo describes run_command.
type CommandsInfo struct {
	// Allowed are the programs a command line may run here; Missing those
	// the operator allowed that this host lacks.
	Allowed    []string `json:"allowed"`
	Missing    []string `json:"missing"`
	Timeout    float64  `json:"timeout"`
	MaxTimeout float64  `json:"max_timeout"`
	// Backend is where commands run: always the native command jail,
	// whose allow-list gVisor would not enforce (see the README).
	Backend string `json:"backend"`
}

// ProfileInfo is one capability profile.
type ProfileInfo struct {
	Enabled bool     `json:"enabled"`
	Setting string   `json:"setting,omitempty"`
	Modules []string `json:"modules"`
}

// ResourceLimits are the defaults and bounds of a run. Durations are in
// seconds, sizes in bytes, except memory limits, which read like "128m".
type ResourceLimits struct {
	Timeout         float64 `json:"timeout"`
	MaxTimeout      float64 `json:"max_timeout"`
	CPUTime         float64 `json:"cpu_time"`
	MaxCPUTime      float64 `json:"max_cpu_time"`
	MaxOutputSize   int64   `json:"max_output_size"`
	MaxOutputLimit  int64   `json:"max_output_limit"`
	MemoryLimit     string  `json:"memory_limit"`
	DataMemoryLimit string  `json:"data_science_memory_limit"`
	MaxMemoryLimit  string  `json:"max_memory_limit"`
	MaxProcesses    int     `json:"max_processes"`
	MaxFileSize     int64   `json:"max_file_size"`
	MaxOpenFiles    int     `json:"max_open_files"`
	TmpSize         int64   `json:"tmp_size"`
	WorkspaceSize   int64   `json:"workspace_size"`
	MaxCodeSize     int64   `json:"max_code_size"`
}

// ContainerMode says whether use_container (the gVisor backend) can be used.
type ContainerMode struct {
	// Available is true when gVisor sandboxes run on this host.
	Available bool `json:"available"`
	// Enabled is true when requests may ask for it (use_container).
	Enabled bool `json:"enabled"`
	// Default is the backend of a request that asks for none.
	Default string `json:"default"`
	// GVisor is what the probe found: runsc's version and platform, or why
	// it does not work here.
	GVisor fleet.GVisorAvailability `json:"gvisor"`
}

// NetworkInfo describes the network profile's egress.
type NetworkInfo struct {
	Enabled bool     `json:"enabled"`
	Allow   []string `json:"allow"`
	// Credentials are the operator's egress credentials, as name@host:
	// the proxy adds them to every networked sandbox's HTTPS requests to
	// that host (never their values).
	Credentials []string `json:"credentials,omitempty"`
	// TrustStore is where a networked session's sandbox finds its
	// proxy's authority (SSL_CERT_FILE names the bundle).
	TrustStore string `json:"trust_store,omitempty"`
}

// IsolationInfo is what doctor reports: the layers every run gets here.
type IsolationInfo struct {
	fleet.Layers
	Backend       string `json:"backend"`
	Interpreter   string `json:"interpreter"`
	PythonVersion string `json:"python_version"`
}

func containerMode(c config.Config) ContainerMode {
	gv := fleet.ProbeGVisor(c.Runsc, c.GVisorPlatform)
	return ContainerMode{Available: gv.Available, Enabled: c.EnableContainerMode || c.Isolation == config.IsolationGVisor,
		Default: c.Isolation, GVisor: gv}
}

// Build describes the server of configuration c, whose package layer
// holds layer and whose commands may run the programs allowed (missing:
// those allowed that this host lacks).
func Build(c config.Config, layer []packages.InstalledPackage, allowed, missing []string) Info {
	info := Info{
		Success:          true,
		SecurityProfiles: map[string]ProfileInfo{},
		DefaultProfiles:  nonNil(c.DefaultProfileSet()),
		ResourceLimits: ResourceLimits{
			Timeout: c.Timeout.Seconds(), MaxTimeout: c.MaxTimeout.Seconds(),
			CPUTime: c.CPUTime.Seconds(), MaxCPUTime: c.MaxCPUTime.Seconds(),
			MaxOutputSize: c.OutputSize, MaxOutputLimit: c.MaxOutput,
			MemoryLimit: humanSize(c.MemoryLimit), DataMemoryLimit: humanSize(c.DataMemory), MaxMemoryLimit: humanSize(c.MaxMemory),
			MaxProcesses: c.MaxProcesses, MaxFileSize: c.MaxFileSize, MaxOpenFiles: c.MaxOpenFiles,
			TmpSize: c.TmpSize, WorkspaceSize: c.WorkspaceMax, MaxCodeSize: c.MaxCodeSize,
		},
		ContainerMode:  containerMode(c),
		Network:        NetworkInfo{Enabled: c.EnableNetwork, Allow: nonNil(c.NetworkAllow)},
		AllowedImports: c.AllowedImports,
		Isolation: IsolationInfo{
			Layers:        fleet.ProbeHost().Layers(),
			Backend:       c.Isolation,
			Interpreter:   c.Interpreter,
			PythonVersion: pythonVersion(c.Interpreter),
		},
	}
	source := c.PipIndexURL
	if c.PipFindLinks != "" {
		source = "wheelhouse"
	}
	info.Packages = PackagesInfo{Source: source, MaxDownload: c.PipMaxDownload, MaxInstall: c.PipMaxInstall,
		Blocked: nonNil(c.BlockedPackages), Layer: layer}
	info.Commands = CommandsInfo{Allowed: nonNil(allowed), Missing: nonNil(missing),
		Timeout: c.CommandTimeout.Seconds(), MaxTimeout: c.MaxCommandTime.Seconds(), Backend: config.IsolationNative}
	info.Kernels = []string{fleet.LangPython}
	for _, k := range c.Kernels {
		if !slices.Contains(info.Kernels, k) {
			info.Kernels = append(info.Kernels, k)
		}
	}
	for _, p := range policy.Profiles {
		info.SecurityProfiles[p.Name] = ProfileInfo{Enabled: c.ProfileEnabled(p.Name), Setting: p.Setting, Modules: p.Modules}
	}
	return info
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// humanSize writes n the way the settings are written: 128m, 1g.
func humanSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"t", 1 << 40}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

var versions sync.Map // interpreter -> version

// pythonVersion asks the interpreter once; it is the operator's own binary,
// run outside the jail with isolated mode.
func pythonVersion(interpreter string) string {
	if v, ok := versions.Load(interpreter); ok {
		return v.(string)
	}
	out, err := exec.Command(interpreter, "-I", "-c", "import sys; print(sys.version.split()[0])").Output()
	v := strings.TrimSpace(string(out))
	if err != nil {
		v = "unavailable: " + err.Error()
	}
	versions.Store(interpreter, v)
	return v
}
