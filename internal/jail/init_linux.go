package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/codecage/codecage/internal/jail/seccomp"
	"github.com/codecage/codecage/internal/loopback"
	"github.com/codecage/codecage/internal/reexec"
	"golang.org/x/sys/unix"
)

// initArg is argv[1] of a re-executed binary that must become a sandbox init.
const initArg = "__codecage_jail_init"

// Descriptors of the init, as laid out by the supervisor.
const (
	fdControl   = 3 // supervisor <-> init messages
	fdChannel   = 4 // becomes ChannelFD in the program
	fdExe       = 5 // the codecage binary, executed through /proc/self/fd
	fdWorkspace = 6 // detached mount of the host workspace, when there is one
	fdBinds     = 8 // detached mounts of Spec.Binds, one each, from here on
)

// initConfig is what the supervisor tells the init to build.
type initConfig struct {
	Argv     []string
	Env      []string
	Hostname string
	// Home is where the workspace is mounted and the program starts.
	Home string
	// HasWorkspace: a detached mount of the workspace is at fdWorkspace.
	HasWorkspace bool
	// WorkspacePath: the init opens the workspace itself (rootless).
	WorkspacePath string
	ReadOnlyBinds []string
	Programs      *Programs
	// HasRoot: the system directories come from Spec.Root (even when it
	// holds none of them), never from the host.
	HasRoot bool
	// RootEntries are the paths that come from Spec.Root, in order; those
	// that are no link are detached mounts from fdRoot on.
	RootEntries []rootEntry
	// RootPath: the init opens Spec.Root and resolves its entries itself
	// (rootless: it may not clone the host's mounts).
	RootPath string
	// rootPlaced: the entries placeRoot took from the root, for the
	// Landlock rules.
	rootPlaced []rootEntry
	Binds      []Bind
	// BindMounts[i]: Binds[i] is a detached mount at fdBinds+i (else the
	// init opens Binds[i].Host itself).
	BindMounts []bool
	// SharedTmp: the last of Binds is Spec.Tmp, mounted writable at /tmp
	// in place of a tmpfs.
	SharedTmp      bool
	TmpBytes       int64
	WorkspaceBytes int64
	Rlimits        []rlimit
	LandlockABI    int
	// CgroupNS asks for a cgroup namespace rooted at the sandbox's cgroup,
	// into which the supervisor has moved the init before sending this.
	CgroupNS bool
	// ForwardPort, if not zero, is the loopback port whose connections the
	// init passes to the supervisor over fdForward.
	ForwardPort int
	// LoopbackServers: Landlock leaves TCP bind and connect to the
	// namespace (Spec.LoopbackServers).
	LoopbackServers bool
	// JoinedNet: the init is in a network namespace another sandbox made
	// (Spec.NetNS), whose lo is up, and which it may not change.
	JoinedNet bool
	// Nested keeps the program's capabilities and leaves the restrictions
	// to it (see nested_linux.go).
	Nested bool
	// CellUIDs is how many uids after SandboxUID the nested program's
	// user namespace maps, one per cell.
	CellUIDs int
	// SettlePids asks the init to report Forking and wait for the
	// supervisor's Fork before it starts the program.
	SettlePids bool
	// Stdin: the init's stdin is the program's stdin pipe (else the
	// program reads /dev/null).
	Stdin bool
	// NoChannel: the program gets no fd ChannelFD (Spec.NoChannel).
	NoChannel bool `json:",omitempty"`
	// Terminal, if set, runs the program on a terminal of the sandbox's
	// own devpts; the init passes its master to the supervisor.
	Terminal *WindowSize
	// Machine: the init starts processes beside the program on the
	// supervisor's word (Spec.Machine, initspawn_linux.go).
	Machine bool `json:",omitempty"`
	// MachineRootFD is the descriptor of a detached mount of the
	// machine's own root (Spec.MachineRoot), or MachineRootPath its path
	// for the init to open (rootless); neither: a tmpfs.
	MachineRootFD   int    `json:",omitempty"`
	MachineRootPath string `json:",omitempty"`
	// RootInside: the user namespace maps ids 0 to MachineIDs-1, and the
	// init keeps spawnerCaps to start processes as root (Spec.RootInside).
	RootInside bool `json:",omitempty"`
	// UsrTree: the supervisor sent, with this configuration, an idmapped
	// mount of the host's /usr for a writable /usr (usroverlay_linux.go);
	// usrTree is its descriptor here.
	UsrTree bool `json:",omitempty"`
	usrTree int
	// PkgStatus: the host's dpkg status file came after /usr's tree, for
	// the machine's package database to start from (pkgskeleton_linux.go);
	// pkgStatus is its descriptor here.
	PkgStatus bool `json:",omitempty"`
	pkgStatus int
	// etc is the /etc overlay's layers, opened with /usr's
	// (etcoverlay_linux.go), until /etc is made.
	etc *machineEtc
	// UsrHidden are the entries of the host's /usr, relative to it, that
	// the machine's /usr hides (usroverlay_linux.go).
	UsrHidden []string `json:",omitempty"`
	// MachineMemory is a machine's memory limit: its /proc's MemTotal.
	MachineMemory int64 `json:",omitempty"`
	// proc is a machine's /proc, which the init renders (mountMachineProc).
	proc *machineProc
	// sudo is where a machine with root inside serves its sudo.
	sudo *net.UnixListener
	// Links are Spec.Links.
	Links map[string]string `json:",omitempty"`
}

// supervisorReply answers an initReport that waits for one.
type supervisorReply struct {
	Fork bool
}

type rlimit struct {
	Resource int
	Cur, Max uint64
}

// initReport is a message from the init to the supervisor.
type initReport struct {
	// Error is set when the sandbox could not be built.
	Error string `json:",omitempty"`
	// Forking: the init is about to fork the program and waits for a reply.
	Forking bool `json:",omitempty"`
	// Started carries the program's pid (inside) once it runs.
	Started int `json:",omitempty"`
	// Exited is set when the program has ended.
	Exited *programExit `json:",omitempty"`
	// Spawned answers a machine's spawn order; ProcExited reports the
	// end of a process it started.
	Spawned    *spawnedReport `json:",omitempty"`
	ProcExited *procExited    `json:",omitempty"`
}

type programExit struct {
	Code, Signal int
	// MaxRSSKiB and CPUNanos come from the rusage of every reaped process.
	MaxRSSKiB int64
	CPUNanos  int64
}

// MaybeRunInit turns this process into a sandbox init when it was started as
// one, and never returns in that case. Call it first thing in main and in
// TestMain of any test binary that starts sandboxes.
func MaybeRunInit() {
	reexec.Run()
	if len(os.Args) < 2 || os.Args[1] != initArg || os.Getpid() != 1 {
		return
	}
	runtime.LockOSThread() // credentials, Landlock and the fork all stay on this thread
	nameInit()
	ctl := os.NewFile(fdControl, "control")
	enc := json.NewEncoder(ctl)
	code, err := runInit(ctl, enc)
	if err != nil {
		_ = enc.Encode(initReport{Error: err.Error()})
		os.Exit(1)
	}
	os.Exit(code)
}

// nameInit names the process as ps and top show it: executed through a
// descriptor (/proc/self/fd/N), its name would be that number. The name
// is the thread group leader's, which this thread is unless the runtime
// moved main before it was locked.
func nameInit() {
	if unix.Gettid() == os.Getpid() {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("codecage-init\x00")[0])), 0, 0, 0)
	}
}

func runInit(ctl *os.File, enc *json.Encoder) (int, error) {
	if err := guardInit(); err != nil {
		return 0, err
	}
	var cfg initConfig
	rights := newRightsReader(ctl)
	dec := json.NewDecoder(rights)
	if err := dec.Decode(&cfg); err != nil {
		return 0, fmt.Errorf("read config: %w", err)
	}
	cfg.usrTree, cfg.pkgStatus = takeUsrFiles(rights.takeAll(), cfg.PkgStatus)
	if cfg.UsrTree && cfg.usrTree < 0 {
		return 0, errors.New("read config: no /usr came with it")
	}
	// Descriptors this process inherited without close-on-exec would
	// otherwise reach the program; only the ones listed below are passed.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, fmt.Errorf("close_range: %w", err)
	}
	if err := setupNamespaces(&cfg); err != nil {
		return 0, err
	}
	if err := unix.Close(fdExe); err != nil {
		return 0, err
	}

	if cfg.HasWorkspace {
		_ = unix.Close(fdWorkspace)
	}
	if cfg.ForwardPort != 0 {
		l, err := listenForward(cfg.ForwardPort)
		if err != nil {
			return 0, err
		}
		go serveForward(l)
	}
	if cfg.Machine {
		warmThreads(MachineThreads)
	}
	term, err := lockDown(&cfg)
	if err != nil {
		return 0, err
	}
	// From here on the init only waits: no collections, so the Go runtime
	// has no reason to start threads that would count against pids.max.
	debug.SetGCPercent(-1)
	if cfg.SettlePids {
		if err := awaitFork(enc, dec); err != nil {
			return 0, err
		}
	}
	pid, err := startProgram(&cfg, term)
	if err != nil {
		return 0, err
	}
	if err := reportStarted(ctl, enc, pid, term); err != nil {
		return 0, err
	}
	var exit programExit
	if cfg.Machine {
		exit = serveMachine(ctl, enc, pid, &cfg)
	} else {
		exit = reap(pid)
	}
	if err := enc.Encode(initReport{Exited: &exit}); err != nil {
		return 0, err
	}
	return 0, nil
}

// guardInit keeps the init, PID 1, from the program: no signal it sends
// kills it, and its /proc entries are closed to it.
func guardInit() error {
	// PID 1 must not die of a signal the program sends it; SIGKILL from the
	// supervisor still ends it, and with it the whole pid namespace. The
	// signals are caught and dropped, not ignored: an ignored signal stays
	// ignored across fork and exec, and the program would inherit a deaf
	// SIGTERM, SIGINT, SIGHUP (kill PID, ^C in a terminal), where a caught
	// one is reset to its default in the child.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGWINCH)
	// Opened while the init still owns its /proc files (serveMachine's
	// forks raise the init's score through it).
	if err := openOwnOOMScore(); err != nil {
		return err
	}
	// Non-dumpable: /proc/1 becomes unreadable to the program (environ, mem,
	// root, exe) and it cannot be ptraced even without seccomp.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	return nil
}

// lockDown restricts the init's thread, which the program is forked from:
// no_new_privs for a nested program (which keeps its capabilities),
// Landlock for any other. It opens the program's terminal in between.
func lockDown(cfg *initConfig) (*terminal, error) {
	if cfg.Nested {
		// The program keeps the capabilities; no_new_privs still holds.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("no_new_privs: %w", err)
		}
	}
	// The terminal is opened before Landlock: the program's descriptors
	// of it then carry every right, its ioctls included.
	term, err := openTerminal(cfg.Terminal)
	if err != nil {
		return nil, err
	}
	if !cfg.Nested {
		if err := restrictSelf(cfg); err != nil {
			return nil, err
		}
	}
	return term, nil
}

// awaitFork asks the supervisor before the program is forked, and waits
// for its leave.
func awaitFork(enc *json.Encoder, dec *json.Decoder) error {
	var reply supervisorReply
	if err := enc.Encode(initReport{Forking: true}); err != nil {
		return err
	}
	if err := dec.Decode(&reply); err != nil || !reply.Fork {
		return fmt.Errorf("supervisor did not allow the fork: %v", err)
	}
	return nil
}

// reportStarted tells the supervisor the program's pid, with the
// terminal's master when it has one.
func reportStarted(ctl *os.File, enc *json.Encoder, pid int, term *terminal) error {
	if term == nil {
		return enc.Encode(initReport{Started: pid})
	}
	// The master goes to the supervisor with the start report; the init
	// keeps no end of the terminal.
	err := sendWithFD(ctl, initReport{Started: pid}, term.master)
	term.close()
	return err
}

// setupNamespaces builds everything that needs the init's capabilities.
func setupNamespaces(cfg *initConfig) error {
	if cfg.CgroupNS {
		// Per thread: the program is forked from this one, so its cgroup
		// namespace is rooted at the sandbox's own cgroup.
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return fmt.Errorf("cgroup namespace: %w", err)
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if !cfg.JoinedNet {
		if err := loopback.Up(); err != nil {
			return err
		}
	}
	if err := limitNestedUserNamespaces(cfg); err != nil {
		return err
	}
	return buildRoot(cfg)
}

// restrictSelf applies the layers that the program inherits, strongest last:
// no_new_privs, Landlock, no capabilities, then seccomp (with TSYNC, so every
// thread of the init is filtered too).
func restrictSelf(cfg *initConfig) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if cfg.LandlockABI > 0 {
		if err := applyLandlock(cfg.LandlockABI, sandboxRules(cfg), cfg.ForwardPort, cfg.LoopbackServers); err != nil {
			return err
		}
	}
	drop := dropCapabilities
	if cfg.RootInside {
		drop = keepRootCapabilities
	}
	if err := drop(); err != nil {
		return err
	}
	prog, err := seccomp.Build(seccomp.Options{})
	if err != nil {
		return err
	}
	if err := seccomp.Install(prog); err != nil {
		return err
	}
	return nil
}

func startProgram(cfg *initConfig, term *terminal) (int, error) {
	devNull, err := os.Open("/dev/null")
	if err != nil {
		return 0, err
	}
	defer devNull.Close()
	stdin := devNull.Fd()
	if cfg.Stdin {
		stdin = 0 // the supervisor's pipe
	}
	attr := &syscall.ProcAttr{
		Dir:   cfg.Home,
		Env:   cfg.Env,
		Files: []uintptr{stdin, 1, 2, fdChannel},
		Sys: &syscall.SysProcAttr{
			Setsid:    true, // its own session, without a terminal unless given one
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if term != nil {
		slave := uintptr(term.slave)
		attr.Files = []uintptr{slave, slave, slave, fdChannel}
		attr.Sys.Setctty, attr.Sys.Ctty = true, 0 // the slave, as the program's fd 0
	}
	if cfg.NoChannel {
		// A command has no use for the harness's channel: it starts
		// with the descriptors it would have anywhere, and no more.
		attr.Files = attr.Files[:3]
	}
	if cfg.Nested {
		attr.Sys.AmbientCaps = capsOf(cfg.CellUIDs)
	}
	pid, err := syscall.ForkExec(cfg.Argv[0], cfg.Argv, attr)
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", cfg.Argv[0], err)
	}
	// Limits go on the program alone (the init's Go runtime would not live
	// under an address-space limit). The supervisor sends no work before the
	// init reports the start, so nothing runs unlimited in between.
	if !cfg.Nested { // a nested program's cells apply the limits, per cell
		if err := limitProcess(pid, cfg); err != nil {
			return 0, err
		}
	}
	// The init's own copies would keep the pipes open after the program ends.
	for _, fd := range []int{1, 2, fdChannel} {
		_ = unix.Close(fd)
	}
	if cfg.Stdin {
		_ = unix.Close(0)
	}
	// Make the program, not the init, the OOM killer's choice; raising the
	// score needs no privilege, and its children inherit it.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
	return pid, nil
}

// limitProcess sets the sandbox's rlimits on pid, a child of the init
// (the program, or a machine's process), or kills it.
func limitProcess(pid int, cfg *initConfig) error {
	// The init's threads run as the same uid and count against
	// RLIMIT_NPROC too. A machine's init may start a few more later: its
	// pids.max leaves room for them (MachineThreads) that this limit keeps
	// its processes from, or a machine at its limit would take the init
	// down (the Go runtime dies when it cannot start a thread).
	threads := ownThreads()
	for _, r := range cfg.Rlimits {
		lim := unix.Rlimit{Cur: r.Cur, Max: r.Max}
		if r.Resource == unix.RLIMIT_NPROC {
			lim.Cur += threads
			lim.Max += threads
		}
		if err := unix.Prlimit(pid, r.Resource, &lim, nil); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			return fmt.Errorf("setrlimit %d: %w", r.Resource, err)
		}
	}
	return nil
}

// reap waits for every child the namespace hands to PID 1 and returns when
// the program itself ends; returning kills the rest of the namespace.
func reap(pid int) programExit {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || got == pid {
			return programEnd(ws)
		}
	}
}

// ownThreads is the init's current number of threads.
func ownThreads() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
