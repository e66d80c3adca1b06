// Package jail starts programs inside a fresh Linux sandbox: new user, pid,
// mount, network, ipc, uts and cgroup namespaces, a minimal read-only root,
// cgroup and rlimit limits, Landlock, a seccomp filter and no capabilities.
//
// The jail knows nothing about Python or about the surfaces that call it: it
// runs an argv with one extra channel (fd 3 inside) and reports how the
// sandbox ended. The codecage binary re-executes itself as the sandbox's init
// (PID 1); programs that use this package must call [MaybeRunInit] first
// thing in main (and in TestMain).
package jail

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Paths inside the sandbox.
const (
	// WorkspaceDir is the read-write working directory of the sandboxed program.
	WorkspaceDir = "/workspace"
	// ChannelFD is the descriptor number of the supervisor channel inside.
	ChannelFD = 3
	// SandboxUID is the unprivileged uid (and gid) the program runs as inside.
	SandboxUID = 1000
)

// HomeOf is the home directory of a sandbox whose Spec.Home is home.
func HomeOf(home string) string {
	if home == "" {
		return WorkspaceDir
	}
	return home
}

// UserOf is the name of the sandbox's user: "sandbox", or the name of
// its home under /home ("user" for /home/user), as a VM would have it.
func UserOf(home string) string {
	if name, ok := strings.CutPrefix(home, "/home/"); ok {
		return name
	}
	return "sandbox"
}

// CheckHome refuses a Spec.Home that is not "", [WorkspaceDir] or
// /home/<name>: a home elsewhere could shadow the system directories.
func CheckHome(home string) error {
	if home == "" || home == WorkspaceDir {
		return nil
	}
	name, ok := strings.CutPrefix(home, "/home/")
	if !ok || name == "" || len(name) > 32 {
		return fmt.Errorf("jail: home %q must be %s or /home/<name>", home, WorkspaceDir)
	}
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '-')) {
			return fmt.Errorf("jail: home %q: the name may hold a-z, 0-9, '_' and '-' only", home)
		}
	}
	return nil
}

// Limit names which limit ended a sandbox.
type Limit string

// The limits a run can hit; the empty Limit means none did.
const (
	LimitNone     Limit = ""
	LimitTimeout  Limit = "timeout"
	LimitCPU      Limit = "cpu_time"
	LimitMemory   Limit = "memory"
	LimitOutput   Limit = "output"
	LimitCanceled Limit = "canceled"
)

// Limits bounds one sandbox. Zero values select the defaults of [DefaultLimits].
type Limits struct {
	// Timeout is the wall-clock lifetime of the sandbox.
	Timeout time.Duration
	// CPUTime is the CPU time of all processes together.
	CPUTime time.Duration
	// CPUCores is the CPU bandwidth of all processes together, in cores
	// (a cgroup's CFS quota): a program with more threads than that is
	// throttled, not killed.
	CPUCores float64
	// MemoryBytes bounds resident memory (tmpfs pages included).
	MemoryBytes int64
	// MaxProcesses bounds the number of tasks the program may run at once.
	MaxProcesses int
	// FileSizeBytes bounds the size of any one written file (RLIMIT_FSIZE).
	FileSizeBytes int64
	// OpenFiles bounds open descriptors per process (RLIMIT_NOFILE).
	OpenFiles int
	// OutputBytes bounds stdout and stderr, each; the sandbox is killed past it.
	OutputBytes int64
	// TmpBytes is the size of the /tmp and /dev/shm tmpfs, each.
	TmpBytes int64
	// WorkspaceBytes is the size of the workspace when it is a tmpfs.
	WorkspaceBytes int64
}

// DefaultLimits are the limits of a run that asks for nothing else.
var DefaultLimits = Limits{
	Timeout:        30 * time.Second,
	CPUTime:        30 * time.Second,
	CPUCores:       1,
	MemoryBytes:    256 << 20,
	MaxProcesses:   64,
	FileSizeBytes:  64 << 20,
	OpenFiles:      256,
	OutputBytes:    1 << 20,
	TmpBytes:       64 << 20,
	WorkspaceBytes: 64 << 20,
}

// WithDefaults returns l with each zero field taken from [DefaultLimits].
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	pick := func(v, def int64) int64 {
		if v > 0 {
			return v
		}
		return def
	}
	l.Timeout = time.Duration(pick(int64(l.Timeout), int64(d.Timeout)))
	l.CPUTime = time.Duration(pick(int64(l.CPUTime), int64(d.CPUTime)))
	if !(l.CPUCores > 0) { // NaN too
		l.CPUCores = d.CPUCores
	}
	l.MemoryBytes = pick(l.MemoryBytes, d.MemoryBytes)
	l.MaxProcesses = int(pick(int64(l.MaxProcesses), int64(d.MaxProcesses)))
	l.FileSizeBytes = pick(l.FileSizeBytes, d.FileSizeBytes)
	l.OpenFiles = int(pick(int64(l.OpenFiles), int64(d.OpenFiles)))
	l.OutputBytes = pick(l.OutputBytes, d.OutputBytes)
	l.TmpBytes = pick(l.TmpBytes, d.TmpBytes)
	l.WorkspaceBytes = pick(l.WorkspaceBytes, d.WorkspaceBytes)
	return l
}

// Spec describes one sandbox.
type Spec struct {
	// ID names the sandbox (and its cgroup); empty picks a random one. It
	// may hold letters, digits, '-' and '_' only.
	ID string
	// Argv is the program and its arguments; Argv[0] is an absolute path inside.
	Argv []string
	// Env is the complete environment of the program (nothing is inherited).
	Env []string
	// Workspace is a host directory mounted read-write at the sandbox's
	// home. Empty means a fresh tmpfs of Limits.WorkspaceBytes.
	Workspace string
	// Home is where the workspace appears inside, the program's working
	// directory and the sandbox user's home: [WorkspaceDir] when empty, else
	// a directory /home/<name> (code written for a VM expects /home/user).
	// See [CheckHome].
	Home string
	// ReadOnlyBinds are extra host paths mounted read-only at the same path.
	ReadOnlyBinds []string
	// Binds are host paths mounted read-only elsewhere in the sandbox.
	Binds []Bind
	// Tmp, if set, is a host directory mounted read-write (noexec) at /tmp
	// instead of a fresh tmpfs of Limits.TmpBytes: a session's, which its
	// interpreter and its commands share as processes of one machine do.
	// Its size is the caller's to cap.
	Tmp string
	// HostUID, when not zero, is the host uid the sandbox runs as (from
	// ReserveUID), instead of one of its own; ignored rootless.
	HostUID int
	// CellUIDs, with Nested and HostUID (then the first of 1+CellUIDs
	// uids from ReserveUIDs), is how many cells the nested program may run
	// at once, each as a host uid of its own: HostUID+1+i, which is
	// CellUID(i) in the program's user namespace. At most MaxCellUIDs;
	// ignored rootless, where cells share the program's uid.
	CellUIDs int
	// Root, if set, is a host directory holding an environment's root
	// filesystem: the sandbox's system directories (/usr, /bin, /lib...,
	// /etc/alternatives, the loader's cache) come from it, read-only,
	// instead of from the host. Empty: the host's.
	Root string
	// Programs, if set, replaces the host's system directories with a
	// minimal root holding only these programs and what they load; nothing
	// else may be executed (see ResolvePrograms). ReadOnlyBinds are then
	// readable but not executable.
	Programs *Programs
	// Limits bounds the sandbox.
	Limits Limits
	// Stdout and Stderr receive the program's output, each capped at
	// Limits.OutputBytes. Nil discards.
	Stdout, Stderr io.Writer
	// Forward, if set, is the one service the sandbox may reach over TCP.
	Forward *Forward
	// LoopbackServers lets the program bind TCP ports and connect to
	// them: servers on its own loopback, which only the supervisor's
	// DialPort reaches from outside (Landlock otherwise refuses every TCP
	// bind and connect; the empty network namespace is then the wall).
	LoopbackServers bool
	// NetNS, if set, is the network namespace the sandbox joins instead
	// of an empty one of its own: a session's (Sandbox.NetNS), which its
	// interpreter and its commands share, so that they reach each other's
	// loopback servers. Its lo is up already; the sandbox's user namespace
	// does not own it, so nothing inside can change it (no interface, no
	// address, no route, no port below 1024).
	NetNS *NetNS
	// Nested marks a trusted program that builds a cell for each piece of
	// untrusted work itself (a zygote): it keeps the init's capabilities in
	// the sandbox's user namespace, gets no Landlock or seccomp, and finds
	// the cell recipe in NestedDir. Requires cgroups (each cell gets one).
	Nested bool
	// SeqPacketChannel makes the channel a SOCK_SEQPACKET socket, which keeps
	// message boundaries (and descriptors passed with them).
	SeqPacketChannel bool
	// NoChannel is for a program that is not the harness (a command,
	// pip): it starts with its standard descriptors only, and the
	// supervisor's channel (Sandbox.Channel) leads nowhere.
	NoChannel bool
	// Stdin gives the program a pipe as its standard input, written with
	// Sandbox.WriteInput and ended with CloseInput; without it (and
	// without Terminal) the program reads /dev/null.
	Stdin bool
	// Machine makes the sandbox a small computer's process tree: once
	// the program runs, Sandbox.Spawn starts more processes beside it,
	// children of the same init under the same namespaces, cgroup,
	// limits, Landlock and seccomp; what they leave running lives until
	// it exits or the sandbox ends; and the workspace and /tmp may hold
	// programs (never set-user-ID ones).
	Machine bool
	// MachineRoot, for a Machine, is a host directory that the sandbox's
	// / is, writable (what the code makes at the top of its tree lands
	// there), with the system directories, /etc, /dev, /proc, /tmp, the
	// home and the binds placed over it at each start; the names they
	// take are removed from it first. Empty: a read-only tmpfs.
	MachineRoot string
	// RootInside, for a Machine with a MachineRoot and a HostUID (root on
	// the host), maps
	// the ids 0 to MachineIDs-1 inside onto the host ids from
	// HostUID-SandboxUID on (a block from ReserveUIDs(MachineIDs)): the
	// program still runs as SandboxUID, and processes spawned with
	// ProcSpec.Root run as root inside, with rootCaps in the sandbox's own
	// user namespace (on the host: the block's first uid, no capability).
	// Files may then belong to any of those ids. Ignored rootless.
	RootInside bool
	// Links are symlinks the init places in a machine's root, path (absolute,
	// under /opt/codecage) to target, such as the interpreter's usual
	// other names (python).
	Links map[string]string
	// Terminal, if set, runs the program on a pseudo-terminal of this
	// size: a devpts instance of the sandbox's own, whose slave is the
	// program's stdin, stdout, stderr and controlling terminal. The
	// supervisor holds the master: the terminal's output goes to Stdout
	// (under its cap), WriteInput types into it, Resize changes its size.
	Terminal *WindowSize
}

// WindowSize is a terminal's size in characters.
type WindowSize struct {
	Cols, Rows uint16
}

// MaxTerminalSide bounds a terminal's columns and rows.
const MaxTerminalSide = 1000

// Check refuses a size no terminal has.
func (w WindowSize) Check() error {
	if w.Cols == 0 || w.Rows == 0 || w.Cols > MaxTerminalSide || w.Rows > MaxTerminalSide {
		return fmt.Errorf("jail: terminal size %dx%d: columns and rows go from 1 to %d", w.Cols, w.Rows, MaxTerminalSide)
	}
	return nil
}

// Bind mounts the host path Host read-only at Path inside the sandbox.
type Bind struct {
	Host, Path string
}

// Forward hands TCP connections made inside the sandbox to 127.0.0.1:Port
// to Handle, outside. The sandbox keeps no network of its own: this is how a
// supervisor offers one service (an egress proxy) and nothing else.
type Forward struct {
	Port   int
	Handle func(net.Conn)
}

// Exit describes how a sandbox ended.
type Exit struct {
	// ExitCode is the program's exit status, or -1 when a signal ended it.
	ExitCode int
	// Signal is the signal that ended the program, or 0.
	Signal int
	// Limit names the limit that ended the sandbox, if one did.
	Limit Limit
	// OOMKilled is true when the kernel's OOM killer ended a process.
	OOMKilled bool
	// Truncated is true when stdout or stderr was cut at the output limit.
	Truncated bool
	// SandboxEnded: a process of a machine (Spawn) ended because its
	// sandbox did, under it.
	SandboxEnded bool
	// PeakMemoryBytes is the peak memory of the sandbox (cgroup) or of its
	// largest process (rusage) when no memory cgroup is available.
	PeakMemoryBytes int64
	// CPUTime is the CPU time used by all processes of the sandbox.
	CPUTime time.Duration
	// Duration is the wall time from start to exit.
	Duration time.Duration
}

// Layers reports which isolation layers a sandbox got on this host.
type Layers struct {
	Rootless    bool   `json:"rootless"`
	Cgroup      string `json:"cgroup"` // "v1", "v2" or "none"
	LandlockABI int    `json:"landlock_abi"`
	Seccomp     bool   `json:"seccomp"`
	// Warnings names each optional layer that is missing and what replaces it.
	Warnings []string `json:"warnings"`
}

// Errors returned by the jail.
var (
	// ErrUnsupported means this host cannot build the required sandbox.
	ErrUnsupported = errors.New("jail: required isolation is unavailable on this host")
	// ErrSetup means the sandbox failed while it was being built.
	ErrSetup = errors.New("jail: sandbox setup failed")
	// ErrEnded means the sandbox has ended (or is being killed): it can
	// no longer be paused or resumed.
	ErrEnded = errors.New("jail: the sandbox has ended")
	// ErrNoInput means the program has no input to write to: it was
	// started without Stdin or Terminal, or its input was closed.
	ErrNoInput = errors.New("jail: the program's input is not open")
	// ErrInputFull means the program did not read its input within the
	// writer's time: what was written so far stays written.
	ErrInputFull = errors.New("jail: the program is not reading its input (its buffer is full)")
)

// NewID returns a random sandbox id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CellUID is the uid of a zygote's cell i in the zygote's user namespace
// (see Spec.CellUIDs); inside its own, the cell is SandboxUID.
func CellUID(i int) int { return SandboxUID + 1 + i }

// MachineThreads is a margin for the threads a machine's init may start
// after its program (the order reader, the reaper, the runtime's own):
// the sandbox's pids.max holds it beyond what its processes' RLIMIT_NPROC
// lets them take.
const MachineThreads = 8

// CellNproc is the RLIMIT_NPROC of a cell with limits l and a uid of its
// own: the code's processes and the cell's init, which runs as that uid.
func CellNproc(l Limits) int { return l.WithDefaults().MaxProcesses + 1 }
