package jail

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A machine with the writable /usr (usroverlay_linux.go) has an /etc of
// its own to change too, as a computer's root does (apt's sources, a user
// added, /etc/hosts), and keeps it. Its /etc is an overlay:
//   - the lower layer is what the init writes at each start in the
//     machine root's etc (the users, the host names, the loader's cache,
//     the alternatives), root inside's, as every sandbox's /etc is made;
//     the file API reads it there;
//   - the upper layer is what root changed, kept in the machine's root
//     under usr, which the /usr overlay covers: the code reaches it only
//     through /etc, and a park, snapshot or fork keeps it with the rest.
// So what root changes stays across restarts, and what codecage writes
// anew shows wherever root left it alone. Without the writable /usr, the
// machine's /etc is made anew at each start, as before.

// Bound of the alternatives copied into a machine's /etc.
const maxAlternatives = 4096

// machineEtc holds the overlay's upper and work directories from before
// the system directories cover usr until /etc is made.
type machineEtc struct {
	upper, work int
}

// openMachineEtc makes (as root inside's) and opens the layers.
func openMachineEtc() (*machineEtc, error) {
	m := &machineEtc{upper: -1, work: -1}
	var err error
	if m.upper, err = rootsDir(etcUpper); err == nil {
		m.work, err = rootsDir(etcWork)
	}
	if err != nil {
		m.close()
		return nil, fmt.Errorf("/etc: %w", err)
	}
	return m, nil
}

// mount gives the made /etc to root inside (the init writes as the
// sandbox's user; nothing of the code's is there yet: the machine root's
// etc was cleared) and mounts the overlay over it.
func (m *machineEtc) mount() error {
	defer m.close()
	err := filepath.WalkDir(newRoot+"/etc", func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 0, 0)
	})
	if err == nil {
		err = mountOverlay(newRoot+"/etc", m.upper, m.work)
	}
	if err != nil {
		return fmt.Errorf("/etc: %w", err)
	}
	return nil
}

func (m *machineEtc) close() { closeLayers(&m.upper, &m.work) }

// copyLinks copies the links of the host's dir into the sandbox's dst (a
// new directory): the alternatives of a machine's own /etc are root's to
// change, and a bind would not show through its overlay. Entries other
// than links are left out (the alternatives are links), and so is what
// lies past max of them.
func copyLinks(dir, dst string, max int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil // none here
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	for i, e := range entries {
		if i == max {
			break
		}
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if err := os.Symlink(target, filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
