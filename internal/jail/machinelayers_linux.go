package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A gVisor machine's own root is built on the host, by the supervisor,
// with the native machine's layout (machineroot_linux.go, the /usr and
// /etc overlays): the same names cleared at each start, the same layers
// under its usr, so that the file API, parks, snapshots and forks treat
// both alike. These are the native pieces it uses from outside the init.

// MachineLayers are the upper and work directories of a machine's /usr
// and /etc overlays, relative to its own root.
func MachineLayers() (usrUp, usrWk, etcUp, etcWk string) {
	return usrUpper, usrWork, etcUpper, etcWork
}

// IdmappedTree is a detached, read-only (nosuid, nodev) clone of the
// directory dir, nothing mounted below it, whose ids show as the user
// namespace userns (a descriptor) maps them. Refused where dir has mounts
// of its own: a clone would not show them.
func IdmappedTree(dir string, userns int) (*os.File, error) {
	if dir == "/usr" && usrHasSubmounts() || dir != "/usr" && hasSubmounts(dir) {
		return nil, fmt.Errorf("%s has mounts of its own", dir)
	}
	return idmappedTree(dir, userns)
}

// HiddenEntries lists, relative to dir, what others may not read there
// (scanHidden), the host's /usr from the scan made once.
func HiddenEntries(dir string) ([]string, error) {
	if dir == "/usr" {
		return usrHidden()
	}
	return scanHidden(dir, maxUsrEntries, maxUsrHidden)
}

// Hide makes a whiteout in the upper layer (a directory, the code's: no
// link in it is followed) for each of hidden, relative to the lower
// layer's host directory lower, the directories on the way owner's.
func Hide(upper, lower string, hidden []string, owner int) error {
	fd, err := unix.Open(upper, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, rel := range hidden {
		if err := whiteout(fd, lower, rel, owner); err != nil {
			return fmt.Errorf("hide %s: %w", rel, err)
		}
	}
	return nil
}

// MountOverlay mounts, over the directory dir, an overlay whose lower
// layer is what dir shows and whose upper and work directories are the
// descriptors upper and work, with the overlay's marks in user.*
// attributes as a native machine's has them (so that a snapshot of
// either backend's root reads alike).
func MountOverlay(dir string, upper, work int) error { return mountOverlay(dir, upper, work) }

// CopyAlternatives copies the host's /etc/alternatives (its links) into
// dst, an /etc being made: the alternatives of a machine's own /etc are
// root's to change, and a bind would not show through its overlay.
func CopyAlternatives(dst string) error {
	for _, p := range hostEtcDirs {
		if err := copyLinks(p, filepath.Join(dst, filepath.Base(p)), maxAlternatives); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// Executable is this binary, open: a helper that runs as ids that may not
// search the directories on its path is started through it.
func Executable() *os.File { return executable() }

// PlaceAptEtc makes apt's directories in etc, a machine's /etc being made
// (the native init makes them in its own): a source or a key added there
// is then root's one line away.
func PlaceAptEtc(etc string) error {
	for _, d := range aptEtcDirs { // pkgskeleton_linux.go
		if err := os.MkdirAll(filepath.Join(etc, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// ClearBut empties the directory dir but for the names kept (the
// machine root's usr but its layers); dir goes if it is not a directory.
// No link in it is followed.
func ClearBut(dir string, kept []string) error { return clearBut(dir, kept) }

// OpenInRoot opens dir of the tree whose root is the directory root (a
// descriptor), for reading, resolving links as that tree's processes do.
func OpenInRoot(root int, dir string) (*os.File, error) {
	fd, err := unix.Openat2(root, strings.TrimPrefix(dir, "/"), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}
