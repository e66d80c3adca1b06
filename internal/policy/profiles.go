package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Profile names.
const (
	Basic       = "basic"
	DataScience = "data_science"
	Network     = "network"
	Filesystem  = "filesystem"
)

// Profile is a named set of importable modules that an operator enables.
type Profile struct {
	Name string
	// Setting is the environment variable that enables the profile; empty
	// for basic, which is always on.
	Setting string
	// Modules are importable names; "a.b" allows a.b and its submodules.
	Modules []string
}

// Profiles are the capability tiers, in the order they are shown.
var Profiles = []Profile{
	{Name: Basic, Modules: BasicModules},
	{Name: DataScience, Setting: "SANDBOX_ENABLE_DATA_SCIENCE", Modules: []string{
		"numpy", "pandas", "scipy", "matplotlib", "mpl_toolkits", "seaborn", "sklearn", "statsmodels",
		"plotly", "sympy", "mpmath", "PIL", "networkx",
	}},
	{Name: Network, Setting: "SANDBOX_ENABLE_NETWORK", Modules: []string{
		"urllib", "urllib.request", "urllib.error", "http", "http.client", "httpx", "requests", "urllib3",
		"aiohttp", "websocket", "websockets", "email", "smtplib", "ftplib", "socket", "ssl",
	}},
	{Name: Filesystem, Setting: "SANDBOX_ENABLE_FILESYSTEM", Modules: []string{
		"os", "os.path", "pathlib", "tempfile", "shutil", "glob", "zipfile", "tarfile",
		"gzip", "bz2", "lzma", "filecmp", "stat", "mmap", "sqlite3",
	}},
}

// LookupProfile returns the profile called name.
func LookupProfile(name string) (Profile, bool) {
	for _, p := range Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// ProfileNames lists the known profiles.
func ProfileNames() []string {
	names := make([]string, len(Profiles))
	for i, p := range Profiles {
		names[i] = p.Name
	}
	return names
}

// Allows reports whether module may be imported under the list allowed: an
// entry allows itself, its submodules, and the packages above it (importing
// "urllib.parse" imports "urllib" first).
func Allows(allowed []string, module string) bool {
	for _, a := range allowed {
		if a == AllImports || a == module || isDotted(module, a) || isDotted(a, module) {
			return true
		}
	}
	return false
}

// isDotted reports whether name is a submodule of pkg ("pkg.x").
func isDotted(name, pkg string) bool {
	return len(name) > len(pkg) && name[len(pkg)] == '.' && strings.HasPrefix(name, pkg)
}

// profilesWith returns the profiles that contain module.
func profilesWith(module string) []Profile {
	var out []Profile
	for _, p := range Profiles {
		if p.Name != Basic && Allows(p.Modules, module) {
			out = append(out, p)
		}
	}
	return out
}

// union returns the modules of the named profiles, sorted and unique.
func union(names []string) []string {
	seen := map[string]bool{}
	for _, n := range names {
		p, _ := LookupProfile(n)
		for _, m := range p.Modules {
			seen[m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// ImportPolicy is what one run may import, with the advice its errors give.
type ImportPolicy struct {
	// Modules may be imported; nil switches the import policy off.
	Modules []string
	// Profiles are the profiles the run uses (for messages and limits).
	Profiles []string
	// Hints maps modules the run may not import to what would allow them.
	Hints map[string]string
	// Defaulted is true when the request named no profile and got the
	// operator's default set: see FeaturesFor.
	Defaulted bool
}

// Features are what a run gets beyond an interpreter and its import list:
// the data_science environment and memory default (and the pool whose
// interpreters have numpy and pandas loaded), and the network profile's
// egress proxy.
type Features struct {
	DataScience bool
	Network     bool
}

// FeaturesFor decides a run's features. A profile the request named is
// given whole. A profile it has by default (it named none) is given when
// the code imports one of its modules that basic lacks (ScanImports) or,
// for network, names a URL: an agent that sends only code gets numpy's
// pool or the proxy when its code shows it needs them, and code that
// needs neither starts as fast as a basic run. A miss costs speed (an
// import loads instead of being preloaded) or, for network, the proxy;
// naming the profile gives it whole.
func (p ImportPolicy) FeaturesFor(code string) Features {
	f := p.Whole()
	if !p.Defaulted || !(f.DataScience || f.Network) {
		return f
	}
	data, network := false, strings.Contains(code, "://")
	ds, _ := LookupProfile(DataScience)
	nw, _ := LookupProfile(Network)
	for _, m := range ScanImports(code) {
		if Allows(BasicModules, m) {
			continue
		}
		data = data || Allows(ds.Modules, m)
		network = network || Allows(nw.Modules, m)
	}
	f.DataScience = f.DataScience && data
	f.Network = f.Network && network
	return f
}

// Whole are the features of every profile the policy has (a session's:
// its code comes later).
func (p ImportPolicy) Whole() Features {
	return Features{DataScience: p.Uses(DataScience), Network: p.Uses(Network)}
}

// Label names the run's profiles for messages: "basic+data_science".
func (p ImportPolicy) Label() string {
	if len(p.Profiles) == 0 {
		return "custom"
	}
	return strings.Join(p.Profiles, "+")
}

// Uses reports whether the run uses profile name.
func (p ImportPolicy) Uses(name string) bool { return slices.Contains(p.Profiles, name) }

// ResolveImports decides what a request may import. profiles and imports
// come from the request (no profiles: the default set,
// DefaultProfileSet); asking for more than the operator allows is an error
// that names the setting that would allow it.
func (c *Operator) ResolveImports(profiles, imports []string) (ImportPolicy, error) {
	defaulted := len(profiles) == 0
	if defaulted {
		profiles = c.DefaultProfileSet()
	}
	// Profiles add to basic: a data_science run still has math and json.
	names := []string{Basic}
	for _, name := range profiles {
		p, ok := LookupProfile(name)
		if !ok {
			return ImportPolicy{}, fmt.Errorf("unknown profile %q (known: %s)", name, strings.Join(ProfileNames(), ", "))
		}
		if !c.ProfileEnabled(name) {
			return ImportPolicy{}, fmt.Errorf("profile %s is not enabled on this server (the operator enables it with %s=true)", name, p.Setting)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	// The operator's ceiling: the override list, or every enabled profile.
	ceiling := c.AllowedImports
	if ceiling == nil {
		ceiling = union(c.EnabledProfiles())
	}
	pol := ImportPolicy{Profiles: names, Defaulted: defaulted}
	switch {
	case len(imports) > 0:
		for _, m := range imports {
			if m == AllImports && !slices.Contains(ceiling, AllImports) {
				return ImportPolicy{}, fmt.Errorf(`allowed_imports "*" switches the import policy off, which this server does not allow (the operator allows it with SANDBOX_ALLOWED_IMPORTS=*)`)
			}
			if m != AllImports && !Allows(ceiling, m) {
				return ImportPolicy{}, fmt.Errorf("allowed_imports asks for %q, which this server does not allow%s", m, c.advice(m))
			}
		}
		pol.Modules = slices.Clone(imports)
	case c.AllowedImports != nil:
		pol.Modules = slices.Clone(c.AllowedImports)
	default:
		pol.Modules = union(names)
	}
	if slices.Contains(pol.Modules, AllImports) {
		pol.Modules = nil
		return pol, nil
	}
	// "*" is the advice for modules no profile has.
	pol.Hints = map[string]string{"*": "it is not available in any profile"}
	for _, p := range Profiles {
		for _, m := range p.Modules {
			if !Allows(pol.Modules, m) {
				pol.Hints[m] = strings.TrimPrefix(c.advice(m), "; ")
			}
		}
	}
	return pol, nil
}

// advice says which profile would allow module and how to get it.
func (c *Operator) advice(module string) string {
	ps := profilesWith(module)
	if len(ps) == 0 {
		return "; it is not available in any profile"
	}
	p := ps[0]
	if c.ProfileEnabled(p.Name) {
		return fmt.Sprintf("; it is available in profile %s (request profile %q)", p.Name, p.Name)
	}
	return fmt.Sprintf("; it is available in profile %s (%s=true)", p.Name, p.Setting)
}
