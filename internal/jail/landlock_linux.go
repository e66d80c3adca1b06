package jail

import (
	"fmt"
	"os"
	"slices"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// landlockABI returns the host's Landlock ABI version, 0 when unavailable.
func landlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// fsRights returns the filesystem rights Landlock ABI abi can restrict.
func fsRights(abi int) uint64 {
	r := uint64(ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir |
		ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym)
	if abi >= 2 {
		r |= ll.AccessFSRefer
	}
	if abi >= 3 {
		r |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		r |= ll.AccessFSIoctlDev
	}
	if abi >= 9 {
		r |= ll.AccessFSResolveUnix
	}
	return r
}

// netRights are the network rights ABI abi can restrict: TCP from 4, UDP
// from 10.
func netRights(abi int) uint64 {
	var r uint64
	if abi >= 4 {
		r = ll.AccessNetBindTCP | ll.AccessNetConnectTCP
	}
	if abi >= 10 {
		r |= ll.AccessNetBindUDP | ll.AccessNetConnectSendUDP
	}
	return r
}

// scopes are the IPC scopes ABI abi can restrict (from 6).
func scopes(abi int) uint64 {
	if abi >= 6 {
		return ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	return 0
}

const (
	readDir   = ll.AccessFSReadFile | ll.AccessFSReadDir
	readExec  = readDir | ll.AccessFSExecute
	writeFile = ll.AccessFSWriteFile | ll.AccessFSTruncate
	// scratch is everything a program may do in its own writable trees:
	// no devices. Refer lets a file be renamed or linked into another
	// directory (apt moves what it fetched out of partial/, git its
	// objects into their directories; without it, EXDEV); Landlock allows
	// that only where the destination grants every right the source has,
	// and the kernel only within one mount.
	scratch = readDir | writeFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir |
		ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeSym | ll.AccessFSRefer
)

// rootRights are the rights on the whole tree: read, or on a machine's
// own root, what its workspace gets (its system directories stay
// read-only mounts, the kernel's refusal, not Landlock's).
func (cfg *initConfig) rootRights() uint64 {
	if cfg.hasMachineRoot() {
		return cfg.scratchRights()
	}
	return readDir
}

// scratchRights are the rights in the workspace and /tmp: a machine's
// programs may execute what they put there.
func (cfg *initConfig) scratchRights() uint64 {
	if cfg.Machine {
		return scratch | ll.AccessFSExecute
	}
	return scratch
}

// landlockRule grants rights beneath one path of the sandbox's root.
type landlockRule struct {
	path   string
	rights uint64
}

// sandboxRules lists what the sandboxed program may touch after pivot_root.
// Everything else, including any path a future mount adds, is denied.
func sandboxRules(cfg *initConfig) []landlockRule {
	rules := []landlockRule{
		// Everything in the sandbox's root may be read: the root holds only
		// what was put there. Execution and writes are granted below.
		{"/", cfg.rootRights()},
		{"/proc", readDir | writeFile},
		{"/dev", readDir},
		{"/tmp", cfg.scratchRights()},
		{"/dev/shm", scratch},
		{cfg.Home, cfg.scratchRights()},
	}
	for _, n := range devNodes {
		rules = append(rules, landlockRule{"/dev/" + n, readDir | writeFile})
	}
	if cfg.hasTerminals() {
		// The sandbox's own terminals (see terminal_linux.go): TIOCSTI
		// and TIOCLINUX stay refused by seccomp.
		terminal := uint64(readDir | writeFile | ll.AccessFSIoctlDev)
		rules = append(rules, landlockRule{"/dev/pts", terminal}, landlockRule{"/dev/tty", terminal})
	}
	if cfg.Programs != nil {
		// Only the programs themselves may be executed; the root's read
		// rule above covers their libraries and data.
		for _, p := range cfg.Programs.Exec {
			rules = append(rules, landlockRule{p, readExec})
		}
		return rules
	}
	for _, d := range hostSystemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			rules = append(rules, landlockRule{d, readExec})
		}
	}
	for _, e := range cfg.rootPlaced {
		// The root's other top-level directories, as its system ones.
		if e.Link == "" && !slices.Contains(hostSystemDirs, e.Path) && !strings.HasPrefix(e.Path, "/etc/") {
			rules = append(rules, landlockRule{e.Path, readExec})
		}
	}
	for _, p := range cfg.ReadOnlyBinds {
		rules = append(rules, landlockRule{p, readExec})
	}
	for i, b := range cfg.Binds {
		if !cfg.isSharedTmp(i) { // the shared /tmp has its scratch rule above
			rules = append(rules, landlockRule{b.Path, readExec})
		}
	}
	return rules
}

// applyLandlock restricts the calling thread (and every process it forks
// afterwards) to rules. TCP and UDP ports are handled, so no socket can bind
// or connect by port except a TCP connect to connectPort (when not zero);
// with servers, TCP bind and connect are left to the network namespace
// (lo only), so that the program can serve on its loopback. Abstract unix
// sockets and signals are scoped to the sandbox. Rights the host's ABI
// lacks are left out.
func applyLandlock(abi int, rules []landlockRule, connectPort int, servers bool) error {
	handled := fsRights(abi)
	net := netRights(abi)
	if servers {
		net &^= ll.AccessNetBindTCP | ll.AccessNetConnectTCP
		connectPort = 0 // a rule for an access not handled is refused
	}
	attr := ll.RulesetAttr{HandledAccessFS: handled, HandledAccessNet: net, Scoped: scopes(abi)}
	rulesetFD, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	defer unix.Close(rulesetFD)
	for _, r := range rules {
		if err := addPathRule(rulesetFD, r.path, r.rights&handled); err != nil {
			return err
		}
	}
	if connectPort != 0 && abi >= 4 {
		attr := ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: uint64(connectPort)}
		if err := ll.LandlockAddNetPortRule(rulesetFD, &attr, 0); err != nil {
			return fmt.Errorf("landlock port rule: %w", err)
		}
	}
	if err := ll.LandlockRestrictSelf(rulesetFD, 0); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}

func addPathRule(rulesetFD int, path string, rights uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock rule %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Directory rights on a file are invalid.
		rights &^= ll.AccessFSReadDir | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar |
			ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo |
			ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSRefer | ll.AccessFSResolveUnix
	}
	attr := ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: fd}
	if err := ll.LandlockAddPathBeneathRule(rulesetFD, &attr, 0); err != nil {
		return fmt.Errorf("landlock rule %s: %w", path, err)
	}
	return nil
}
