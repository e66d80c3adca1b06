package fleet

import (
	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/pool"
	"github.com/codecage/codecage/internal/runtime"
)

// The facts of the layers below that the layers above need: the fleet
// re-exports them, so that nothing above it imports the jail, gVisor, the
// harness or the pools (internal/archtest holds the rule). They are
// aliases, not copies: a result that carries Layers is the jail's Layers,
// in the same JSON.

// What a sandbox is given and what it ends with.
type (
	// Spec is everything a sandbox is built from; only work.go fills one.
	Spec = jail.Spec
	// Limits bound one sandbox; only work.go fills one.
	Limits = jail.Limits
	// Limit names the limit that ended a sandbox, or none.
	Limit = jail.Limit
	// Exit is how a sandbox's program ended.
	Exit = jail.Exit
	// Bind is a host directory seen inside a sandbox.
	Bind = jail.Bind
	// Forward carries a sandbox's connections to one port to the host.
	Forward = jail.Forward
	// Programs are the host programs a command jail shows.
	Programs = jail.Programs
	// Layers are the isolation layers a sandbox runs under.
	Layers = jail.Layers
	// Host is what this host's kernel offers the jail.
	Host = jail.Host
	// WindowSize is a terminal's size.
	WindowSize = jail.WindowSize
	// NetNS is a network namespace the host holds: a session's, which
	// its native sandboxes share.
	NetNS = jail.NetNS
)

// Errors of a program's input (see Lease.WriteInput).
var (
	ErrNoInput   = jail.ErrNoInput
	ErrInputFull = jail.ErrInputFull
)

// The limits that can end a sandbox.
const (
	LimitNone     = jail.LimitNone
	LimitTimeout  = jail.LimitTimeout
	LimitCPU      = jail.LimitCPU
	LimitMemory   = jail.LimitMemory
	LimitOutput   = jail.LimitOutput
	LimitCanceled = jail.LimitCanceled
)

// MaxTerminalSide bounds a terminal's columns and rows.
const MaxTerminalSide = jail.MaxTerminalSide

// WorkspaceDir is the workspace's path inside a sandbox.
const WorkspaceDir = jail.WorkspaceDir

// ProgramSearchPath is where a command's program names are looked up.
var ProgramSearchPath = jail.ProgramSearchPath

// NewID is a new sandbox or execution id.
func NewID() string { return jail.NewID() }

// HomeOf is the home directory a session's home setting means.
func HomeOf(home string) string { return jail.HomeOf(home) }

// UserOf is the user name a home directory implies.
func UserOf(home string) string { return jail.UserOf(home) }

// CheckHome refuses a home directory a sandbox cannot have.
func CheckHome(home string) error { return jail.CheckHome(home) }

// SystemTree lists the host directories a session's sandbox shows
// read-only at the same paths.
func SystemTree() []string { return jail.SystemTree() }

// RootTopLevel is what a session with home, from an environment's root,
// shows of the root besides its system directories (/app, /opt/...), and
// why the entries left out were.
func RootTopLevel(root, home string) ([]jail.RootMount, []string, error) {
	return jail.RootTopLevel(root, home)
}

// ResolvePrograms finds the named host programs and the data they need.
func ResolvePrograms(names, data []string) (*Programs, error) {
	return jail.ResolvePrograms(names, data)
}

// ResolveProgramsIn finds the named programs and the data they need in
// an environment's root ("": the host's), never outside it.
func ResolveProgramsIn(root string, names, data []string) (*Programs, error) {
	return jail.ResolveProgramsIn(root, names, data)
}

// ProbeHost is what this host offers the jail, probed once per process.
func ProbeHost() Host { return jail.ProbeHost() }

// The host uids of sandboxes: one reserved per session, leased host-wide
// (ReserveUID, HoldUID, ReleaseUID: uidholds.go).

// InUIDSpan reports whether uid is one sandboxes run as on this host.
func InUIDSpan(uid int) bool { return jail.InUIDSpan(uid) }

// LeasedUIDRanges are the uid blocks this process holds, [first, end).
func LeasedUIDRanges() [][2]int { return jail.LeasedUIDRanges() }

// UIDRangesLeasedBy are the uid blocks whose lease names pid, [first, end).
func UIDRangesLeasedBy(pid int) [][2]int { return jail.UIDRangesLeasedBy(pid) }

// UIDSpan is the host uids sandboxes run as, and where their leases live.
func UIDSpan() (base, count int, leaseDir string) {
	return jail.HostUIDBase, jail.HostUIDCount, jail.UIDLeaseDir
}

// GVisorAvailability describes the gVisor backend on this host.
type GVisorAvailability = gvisor.Availability

// ProbeGVisor runs (once per runsc and platform) a gVisor sandbox and
// says what it found.
func ProbeGVisor(runsc, platform string) GVisorAvailability {
	return gvisor.Probe(gvisor.Runtime{Runsc: runsc, Platform: platform})
}

// The counts of the pools and of the sandbox budget.
type (
	PoolStats   = pool.Stats
	BudgetStats = pool.BudgetStats
)

// The harness's side of a run: what a request carries, what the code's
// tool calls are, what comes back.
type (
	HarnessRequest  = runtime.Request
	ToolSpec        = runtime.ToolSpec
	ToolParam       = runtime.ToolParam
	ToolCall        = runtime.ToolCall
	ToolResult      = runtime.ToolResult
	ToolHandler     = runtime.ToolHandler
	Image           = runtime.Image
	Output          = runtime.Output
	Validation      = runtime.Validation
	ValidateRequest = runtime.ValidateRequest
)

// DefaultInterpreter is the Python the harness runs under by default.
const DefaultInterpreter = runtime.DefaultInterpreter

// PackagesDir is where the operator's package layer is seen inside a sandbox.
const PackagesDir = runtime.PackagesDir

// The kernels a session's code may run in besides Python's interpreter.
const (
	LangPython     = runtime.LangPython
	LangJavaScript = runtime.LangJavaScript
	LangTypeScript = runtime.LangTypeScript
	LangBash       = runtime.LangBash
)

// Languages are the kernels' languages, Python first.
var Languages = runtime.Languages

// NormalizeLanguage names a language as E2B's code interpreter does ("js"
// is javascript, "" python); ok is false for one no kernel runs.
func NormalizeLanguage(lang string) (string, bool) { return runtime.NormalizeLanguage(lang) }

// MachineEtcIsKept reports whether a machine's own root keeps root's
// changes to its /etc in an overlay, out of the file API's reach.
func MachineEtcIsKept(root string) bool { return jail.MachineEtcIsKept(root) }

// OwnIDMap says whether this process runs on the host's user ids, and if
// not, how its user namespace maps them (a pod with hostUsers: false).
func OwnIDMap() (onHost bool, desc string) { return jail.OwnIDMap() }

// CapSysAdmin is CAP_SYS_ADMIN's bit, for HasCapability.
const CapSysAdmin = jail.CapSysAdmin

// HasCapability reports whether this process holds capability bit cap
// (true when that cannot be read).
func HasCapability(cap uint) bool { return jail.HasCapability(cap) }
