package packages

// EventInstall is the event kind of pip_install.
const EventInstall = "install"

// InstallRequest asks to install a package into a session.
type InstallRequest struct {
	Package   string
	Version   string // "" or "latest", a version, or a PEP 440 specifier
	SessionID string
	Owner     string
}

// Why an install failed, in InstallResult.Error.
const (
	InstallBlocked   = "blocked"
	InstallNotFound  = "not_found"
	InstallNoWheel   = "no_wheel"
	InstallTooLarge  = "too_large"
	InstallConflict  = "conflict"
	InstallTimeout   = "timeout"
	InstallFailed    = "failed"
	wheelhouseInside = "/opt/codecage/wheelhouse"
)

// InstallResult is pip_install's result: the seed's fields, what was
// installed (dependencies included) and why not.
type InstallResult struct {
	Success          bool               `json:"success"`
	Message          string             `json:"message"`
	Package          string             `json:"package"`
	InstalledVersion *string            `json:"installed_version"`
	InstallationTime float64            `json:"installation_time"`
	Error            *string            `json:"error" doc:"Why it failed: blocked, not_found, no_wheel, too_large, conflict, timeout or failed."`
	Warnings         []string           `json:"warnings"`
	Installed        []InstalledPackage `json:"installed"`
	// Log is the end of pip's output, for a failure's details.
	Log         string `json:"log"`
	ExecutionID string `json:"execution_id"`
}

// InstalledPackage is one distribution in a session's package directory.
type InstalledPackage struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Modules []string `json:"modules"`
}
