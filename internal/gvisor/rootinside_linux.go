package gvisor

// What a gVisor machine with root inside has in its bundle's root besides
// the identity's map (identity_linux.go): its tree root inside's, dpkg's
// state, and its sudo.

import (
	_ "embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/codecage/codecage/internal/jail"
)

// rootsOwnTree gives a root-inside machine's root what a native one's
// has, root inside's (the block's first id) as a Debian system's are
// root's: on the host's system, /var with the package managers' state
// (the host's status, which describes the /usr it sees; an environment's
// root brings its own /var, bound over it), a sticky /var/tmp, and every
// entry the bundle made (/etc's files, the links, /opt). What the host's
// root owns shows as nobody inside (unmapped); runsc overlays all of it
// with memory, so root inside may change it there.
func rootsOwnTree(root string, first int, hostSystem bool) error {
	if hostSystem {
		if err := jail.PlacePackageState(root); err != nil {
			return fmt.Errorf("gvisor: package state: %w", err)
		}
	}
	tmp := filepath.Join(root, "var", "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil // the user's, as a native machine's /
		}
		return os.Lchown(p, first, first)
	})
}

// sudod is the sudo server the harness's init runs in a machine with
// root inside: see sudod.py.
//
//go:embed sudod.py
var sudod string

// sudoEnv is env with what the harness's init needs to serve sudo and to
// run the harness as uid.
func sudoEnv(env []string, uid int) []string {
	return append(slices.Clip(env), "CODECAGE_SUDO="+strconv.Itoa(uid)+":"+jail.SudoSocket, "CODECAGE_SUDO_SERVER="+sudod)
}

// placeSudo writes the machine's sudo (jail's script, run by python) and
// makes its server's socket directory, in the bundle's root.
func placeSudo(root, python string) error {
	dst := filepath.Join(root, jail.SudoPath)
	for _, d := range []string{filepath.Dir(dst), filepath.Dir(filepath.Join(root, jail.SudoSocket))} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("gvisor: sudo: %w", err)
		}
	}
	return os.WriteFile(dst, []byte(jail.SudoScript(python)), 0o755)
}
