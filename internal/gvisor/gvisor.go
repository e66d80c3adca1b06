// Package gvisor is the second isolation backend: it runs a sandbox's
// program under gVisor's runsc, so a user-space kernel stands between the
// code and the host's. It takes the same [jail.Spec] as the native jail and
// reports the same [jail.Exit]; what differs is documented on [Start].
//
// Each sandbox is one `runsc run` of a bundle made for it (a read-only root
// of the host's /usr, a generated /etc, tmpfs /tmp, the workspace), in a
// cgroup of its own that bounds the memory and tasks of runsc's processes
// (runsc is told to leave cgroups alone: its own handling hangs on cgroup
// v1 here).
package gvisor

import "errors"

// Runtime says how to run runsc.
type Runtime struct {
	// Runsc is the runsc binary; empty means PinnedRunsc where it is
	// installed, else "runsc" on PATH.
	Runsc string
	// Platform is gVisor's platform: "systrap", "ptrace" or "kvm"; empty or
	// PlatformAuto picks systrap where this runsc has it and a sandbox runs
	// on it, else ptrace.
	Platform string
	// StateDir holds each sandbox's bundle and runsc state while it runs;
	// empty means /run/codecage/gvisor.
	StateDir string
}

// The platforms a Runtime may name. kvm is accepted but never picked: it
// needs /dev/kvm and hangs in VMs without nested virtualization.
const (
	PlatformAuto    = "auto"
	PlatformSystrap = "systrap"
	PlatformPtrace  = "ptrace"
	PlatformKVM     = "kvm"
)

// PinnedRunsc is where scripts/setup.sh installs the runsc it builds (a
// current one, pinned there), preferred to a distribution's on PATH.
const PinnedRunsc = "/usr/local/lib/codecage/runsc"

// DefaultStateDir is where bundles live when Runtime.StateDir is empty.
const DefaultStateDir = "/run/codecage/gvisor"

// SentryHeadroom is memory the cgroup grants above the sandbox's limit:
// gVisor's kernel (the Sentry) and its file proxy (the Gofer) live there too.
const SentryHeadroom = 48 << 20

// Availability describes the gVisor backend on this host.
type Availability struct {
	// Available is true when a sandbox ran here.
	Available bool `json:"available"`
	// Runsc is the binary found.
	Runsc string `json:"runsc,omitempty"`
	// Version is what `runsc --version` printed first.
	Version string `json:"version,omitempty"`
	// Platform is the platform the sandboxes use.
	Platform string `json:"platform"`
	// Platforms are those this runsc offers (`runsc platforms`; a runsc
	// without that command offers ptrace and kvm).
	Platforms []string `json:"platforms,omitempty"`
	// PlatformNote says why the platform picked is not the preferred one.
	PlatformNote string `json:"platform_note,omitempty"`
	// EnforcesNoexec is true when this runsc's kernel refuses to map code
	// from a noexec mount (a loader run on a copied binary in /tmp fails),
	// as Linux does: what a minimal root of allowed programs rests on.
	// Debian 12's runsc (2022) maps it.
	EnforcesNoexec bool `json:"enforces_noexec"`
	// StartupSeconds is how long the probe's sandbox took, start to end.
	StartupSeconds float64 `json:"startup_seconds,omitempty"`
	// Error says why the backend is unavailable.
	Error string `json:"error,omitempty"`
}

// ErrUnavailable means runsc is missing or cannot run sandboxes here.
var ErrUnavailable = errors.New("gvisor: unavailable")

// ForwardSocket is where a sandbox with a jail.Forward finds the host's
// end: a unix socket, through which each connection reaches the Forward's
// handler. gVisor passes no descriptors in, so the program relays
// 127.0.0.1:Port to it itself (the harness's init does), and runsc is
// allowed to connect to host sockets (--host-uds=open), which reach only
// what is bound into the sandbox: this socket.
const ForwardSocket = "/run/codecage/forward.sock"
