package jail

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/codecage/codecage/internal/jail/seccomp"
	"golang.org/x/sys/unix"
)

// A nested sandbox program (Spec.Nested) is trusted code, a zygote, that
// builds one cell per piece of untrusted work inside its own sandbox: it
// keeps the init's capabilities in the sandbox's user namespace, and for
// each cell forks, unshares new mount, pid, net, ipc, uts and cgroup
// namespaces, mounts fresh scratch space and /proc, and applies exactly the
// restrictions a whole sandbox gets, as written in the recipe below.

// NestedDir holds, inside a nested sandbox, the cell recipe and a full,
// unmasked proc: the kernel lets a user namespace mount proc only while one
// is fully visible. Cells unmount it before any untrusted code runs.
const NestedDir = "/run/codecage"

// CellRecipe is what a cell must apply, in order, before it runs untrusted
// code. The init writes it as JSON to NestedDir/cell.json.
type CellRecipe struct {
	Hostname       string
	TmpBytes       int64
	WorkspaceBytes int64
	UID            int
	// CellUIDs, when not zero, is how many cells may run at once as uids
	// of their own: FirstCellUID on in this user namespace, each a host
	// uid no other sandbox has. The supervisor names a cell's uid in its fork
	// command; the cell takes it, then moves into a user namespace of its
	// own where it is UID. Zero (rootless): cells share UID.
	CellUIDs     int
	FirstCellUID int
	// Rlimits are [resource, soft, hard]. RLIMIT_NPROC, counted per uid,
	// is left out: a cell with a uid of its own gets it from its fork
	// command (CellNproc of the cell's limits); cells that share the uid
	// have the pids cgroup alone.
	Rlimits [][3]uint64
	// ProcOptions are the options of each cell's /proc (ProcOptions).
	ProcOptions string
	ProcDir     string // the full proc to detach
	Landlock    LandlockRecipe
	// Seccomp is the filter program (struct sock_filter array), base64.
	Seccomp string
}

// LandlockRecipe is a ruleset as the kernel takes it.
type LandlockRecipe struct {
	ABI        int
	HandledFS  uint64
	HandledNet uint64
	Scoped     uint64
	Rules      []LandlockPathRule
}

// LandlockPathRule grants Rights beneath Path.
type LandlockPathRule struct {
	Path   string
	Rights uint64
}

// prepareNested mounts the full proc and writes the recipe into the new
// root, before pivot_root.
func prepareNested(cfg *initConfig) error {
	dir := newRoot + NestedDir
	if err := os.MkdirAll(dir+"/proc", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("proc", dir+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount nested proc: %w", err)
	}
	r, err := cellRecipe(cfg)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cell.json"), b, 0o444)
}

func cellRecipe(cfg *initConfig) (*CellRecipe, error) {
	prog, err := seccomp.Build(seccomp.Options{})
	if err != nil {
		return nil, err
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(prog)*int(unsafe.Sizeof(prog[0])))
	r := &CellRecipe{
		Hostname:       cfg.Hostname,
		TmpBytes:       cfg.TmpBytes,
		WorkspaceBytes: cfg.WorkspaceBytes,
		UID:            SandboxUID,
		CellUIDs:       cfg.CellUIDs,
		FirstCellUID:   CellUID(0),
		ProcOptions:    ProcOptions,
		ProcDir:        NestedDir + "/proc",
		Seccomp:        base64.StdEncoding.EncodeToString(raw),
	}
	for _, rl := range cfg.Rlimits {
		if rl.Resource != unix.RLIMIT_NPROC {
			r.Rlimits = append(r.Rlimits, [3]uint64{uint64(rl.Resource), rl.Cur, rl.Max})
		}
	}
	if abi := cfg.LandlockABI; abi > 0 {
		r.Landlock = LandlockRecipe{ABI: abi, HandledFS: fsRights(abi), HandledNet: netRights(abi), Scoped: scopes(abi)}
		for _, rule := range sandboxRules(cfg) {
			r.Landlock.Rules = append(r.Landlock.Rules, LandlockPathRule{rule.path, rule.rights & r.Landlock.HandledFS})
		}
	}
	return r, nil
}
