package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/reexec"
)

// The writer of a gVisor machine's own root (ownroot_linux.go): this
// binary again, as root of a user namespace that maps the machine's block
// as its sandbox's does. It holds no privilege on the host: the root is
// the code's to have changed (a link where a directory was, planted from
// inside or through the file API), and whatever it follows there, it may
// write only what the block's ids may.

// ownRootArg, as the binary's first argument, makes it the writer.
const ownRootArg = "codecage-gvisor-own-root"

func init() { reexec.Register(ownRootArg, writerMain) }

// rootKeeps are top-level names of a machine's skeleton whose contents the
// root keeps from one start to the next (what is missing is added): root's
// home, /var (the package managers' state) and /tmp, as a computer keeps
// them across a restart (and E2B's, across a pause).
var rootKeeps = []string{"root", "var", "tmp"}

// ownRootJob is what the writer is asked to do.
type ownRootJob struct {
	Root string `json:"root"` // the machine's own root (host path)
	Skel string `json:"skel"` // the skeleton the supervisor made, root inside's
	// HostStatus: seed a new dpkg status from the host's; Alternatives:
	// copy the host's /etc/alternatives into the new /etc (cheaper here
	// than in the supervisor, and root inside's as made).
	HostStatus   bool `json:"host_status"`
	Alternatives bool `json:"alternatives"`
	// Hidden are /usr's entries others may not read (relative to Lower),
	// hidden in its upper layer; Lower is /usr's host directory.
	Hidden []string `json:"hidden,omitempty"`
	Lower  string   `json:"lower,omitempty"`
}

// send gives the writer its job and closes its input.
func (job ownRootJob) send(w io.WriteCloser) error {
	err := json.NewEncoder(w).Encode(job)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// writerAttr starts the writer as root of a new user namespace that maps
// ids 0 to MachineIDs-1 onto the block from first on, with no group of
// the supervisor's, killed if the supervisor dies.
func writerAttr(first int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: first, Size: jail.MachineIDs}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: first, Size: jail.MachineIDs}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		Pdeathsig:   unix.SIGKILL,
	}
}

// writerMain is the writer's main.
func writerMain() int {
	var job ownRootJob
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 4<<20)).Decode(&job); err != nil {
		fmt.Fprintln(os.Stderr, "codecage own-root writer:", err)
		return 2
	}
	if err := job.run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// run clears from the root what the last start placed there (the
// skeleton's other top-level names; of usr, all but the overlays'
// layers), copies the skeleton in, adds what is missing of what the root
// keeps, and makes the layers of /usr and /etc.
func (job ownRootJob) run() error {
	usrUp, usrWk, etcUp, etcWk := jail.MachineLayers()
	layers := []string{filepath.Base(usrUp), filepath.Base(usrWk), filepath.Base(etcUp), filepath.Base(etcWk)}
	entries, err := os.ReadDir(job.Skel)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		dst := filepath.Join(job.Root, name)
		switch {
		case name == "tmp":
			continue // placeKept makes it, sticky, if missing
		case slices.Contains(rootKeeps, name):
			if err := keepDir(dst, filepath.Join(job.Skel, name)); err != nil {
				return err
			}
			continue
		case name == "usr":
			if err := jail.ClearBut(dst, layers); err != nil {
				return err
			}
		default:
			// RemoveAll unlinks a link itself and follows none.
			if err := os.RemoveAll(dst); err != nil {
				return fmt.Errorf("clear /%s: %w", name, err)
			}
		}
		if err := copyTree(filepath.Join(job.Skel, name), dst); err != nil {
			return fmt.Errorf("place /%s: %w", name, err)
		}
	}
	if job.Alternatives {
		if err := jail.CopyAlternatives(filepath.Join(job.Root, "etc")); err != nil {
			return fmt.Errorf("/etc/alternatives: %w", err)
		}
	}
	if job.HostStatus {
		if err := jail.PlaceAptEtc(filepath.Join(job.Root, "etc")); err != nil {
			return fmt.Errorf("/etc/apt: %w", err)
		}
	}
	if err := placeKept(job.Root, job.HostStatus); err != nil {
		return err
	}
	for _, rel := range []string{usrUp, usrWk, etcUp, etcWk} {
		if err := mkdirNoFollow(job.Root, rel, 0o755); err != nil {
			return fmt.Errorf("layer %s: %w", rel, err)
		}
	}
	if job.Lower != "" {
		return jail.Hide(filepath.Join(job.Root, usrUp), job.Lower, job.Hidden, 0)
	}
	return nil
}

// keepDir makes dst like the skeleton's src if it is not a directory
// (what the code put there instead goes).
func keepDir(dst, src string) error {
	if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
		return nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return copyTree(src, dst)
}

// placeKept adds what is missing of the kept names: dpkg's and apt's
// state, a sticky /var/tmp and /tmp.
func placeKept(root string, hostStatus bool) error {
	if hostStatus {
		if err := jail.PlacePackageState(root); err != nil {
			return fmt.Errorf("package state: %w", err)
		}
	}
	for _, rel := range []string{"var/tmp", "tmp"} {
		if err := mkdirNoFollow(root, rel, os.ModeSticky|0o777); err != nil {
			return fmt.Errorf("/%s: %w", rel, err)
		}
	}
	return nil
}

// mkdirNoFollow makes each missing directory of rel under root (a new
// one with mode), following no link on the way: what the code put where
// a directory belongs (a link, a file) goes, and a directory is made.
func mkdirNoFollow(root, rel string, mode os.FileMode) error {
	cur := root
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		cur = filepath.Join(cur, p)
		m := os.FileMode(0o755)
		if i == len(parts)-1 {
			m = mode
		}
		if fi, err := os.Lstat(cur); err == nil && !fi.IsDir() {
			if err := os.Remove(cur); err != nil {
				return err
			}
		}
		if err := os.Mkdir(cur, m); err == nil {
			if err := os.Chmod(cur, m); err != nil { // past the umask
				return err
			}
			continue
		} else if !errors.Is(err, fs.ErrExist) {
			return err
		}
		if fi, err := os.Lstat(cur); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", strings.Join(parts[:i+1], "/"))
		}
	}
	return nil
}

// copyTree copies the skeleton's src to dst: directories, files and
// links, with their modes and owners (root inside's); dst's directories
// that exist are merged into, never followed when they are links.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, info.Mode().Perm()); err != nil {
				if fi, lerr := os.Lstat(to); lerr != nil || !fi.IsDir() {
					return err
				}
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(p, to, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid < jail.MachineIDs && st.Gid < jail.MachineIDs {
			if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		if !d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		return os.Chmod(to, info.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid))
	})
}

// copyFile copies the skeleton's file src to a new file dst.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
