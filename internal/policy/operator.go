package policy

// Operator is what the operator allows requests to ask for: the profiles
// enabled, an override of their modules, the profiles of a request that
// names none. The configuration embeds it; the import decisions
// (ResolveImports) read only it.
type Operator struct {
	EnableDataScience bool
	EnableNetwork     bool
	EnableFilesystem  bool
	// AllowedImports overrides every profile's modules; nil means no
	// override, ["*"] switches the import policy off.
	AllowedImports []string
	// DefaultProfiles are the profiles of a request that names none; nil
	// means every enabled profile (DefaultProfileSet).
	DefaultProfiles []string
}

// ProfileEnabled reports whether the operator enabled profile name.
func (c *Operator) ProfileEnabled(name string) bool {
	switch name {
	case Basic:
		return true
	case DataScience:
		return c.EnableDataScience
	case Network:
		return c.EnableNetwork
	case Filesystem:
		return c.EnableFilesystem
	}
	return false
}

// DefaultProfileSet is what a request that names no profile gets:
// SANDBOX_DEFAULT_PROFILES when set, else every profile the operator
// enabled. Enabling a profile is what makes its modules importable; an
// agent that sends only code need not know profiles exist.
func (c *Operator) DefaultProfileSet() []string {
	if c.DefaultProfiles != nil {
		return c.DefaultProfiles
	}
	return c.EnabledProfiles()
}

// EnabledProfiles lists the enabled profiles in their usual order.
func (c *Operator) EnabledProfiles() []string {
	var out []string
	for _, p := range Profiles {
		if c.ProfileEnabled(p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
}
