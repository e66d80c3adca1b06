package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rootEntry is one path of a sandbox that comes from Spec.Root: a symlink
// recreated as it is in the root (Link), or a read-only mount of what the
// root holds there.
type rootEntry struct {
	Path string
	Link string `json:",omitempty"`
	Dir  bool   `json:",omitempty"`
}

// rootPath is a path the sandbox takes from a root, and what it may be.
type rootPath struct {
	path     string
	dir      bool // a directory (else a regular file); program paths take either
	either   bool // a program's file or data tree: a directory or a file
	link     bool // a symlink in the root is recreated as that symlink
	required bool
	// optional: one of the root's own top-level entries (rootExtraPaths),
	// left out when it is of another kind than wanted.
	optional bool
}

// rootEtcDirs and rootEtcFiles are taken from a root when it has them:
// the loader's cache and the /etc trees the image's programs expect.
var (
	rootEtcDirs  = []string{"/etc/alternatives", "/etc/ssl"}
	rootEtcFiles = []string{"/etc/ld.so.cache", "/etc/os-release"}
)

// rootPaths lists what a sandbox with a root takes from it: the system
// directories and rootEtcDirs/Files or, for a command jail, its programs'
// files (found in the root by ResolveProgramsIn) and the loader's cache.
func rootPaths(p *Programs) []rootPath {
	var out []rootPath
	if p == nil {
		for _, d := range hostSystemDirs {
			out = append(out, rootPath{path: d, dir: true, link: true})
		}
		for _, d := range rootEtcDirs {
			out = append(out, rootPath{path: d, dir: true, link: true})
		}
	} else {
		for _, list := range [][]string{p.Exec, p.Files} {
			for _, f := range list {
				out = append(out, rootPath{path: f, either: true, required: true})
			}
		}
	}
	for _, f := range rootEtcFiles {
		if p != nil && f != "/etc/ld.so.cache" {
			continue
		}
		out = append(out, rootPath{path: f, link: true})
	}
	return out
}

// rootPathsIn is rootPaths and the root's other top-level entries but
// those beneath reserved (in a command jail too, where only its programs
// may be executed: Landlock grants them no more than reading).
func rootPathsIn(t *rootTree, p *Programs, reserved []string) ([]rootPath, error) {
	paths := rootPaths(p)
	extra, _, err := rootExtraPaths(t, reserved)
	return append(paths, extra...), err
}

// openRootEntries opens each of paths beneath the root, resolving in it
// (RESOLVE_IN_ROOT): a symlink among the directories on the way stays in
// the root, and the path itself, when a symlink, is returned as one, never
// followed. fds holds an O_PATH descriptor per entry that is not a link.
func openRootEntries(t *rootTree, paths []rootPath) (entries []rootEntry, fds []int, err error) {
	defer func() {
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			entries, fds = nil, nil
		}
	}()
	for _, rp := range paths {
		fd, err := t.openAt(rp.path, unix.O_PATH|unix.O_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) && !rp.required {
			continue
		}
		if err != nil {
			return entries, fds, fmt.Errorf("jail: root %s: %w", t.dir, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return entries, fds, err
		}
		kind := st.Mode & unix.S_IFMT
		ok := kind == unix.S_IFDIR && (rp.dir || rp.either) || kind == unix.S_IFREG && (!rp.dir || rp.either)
		switch {
		case kind == unix.S_IFLNK && rp.link:
			target, err := readlinkFD(fd)
			unix.Close(fd)
			if err != nil {
				return entries, fds, fmt.Errorf("jail: root %s: %s: %w", t.dir, rp.path, err)
			}
			entries = append(entries, rootEntry{Path: rp.path, Link: target})
			continue
		case !ok && rp.optional:
			unix.Close(fd)
			continue
		case !ok:
			unix.Close(fd)
			return entries, fds, fmt.Errorf("jail: root %s: %s is %s, not a %s", t.dir, rp.path, kindName(kind), wantName(rp))
		case st.Mode&0o022 != 0:
			unix.Close(fd)
			return entries, fds, fmt.Errorf("jail: root %s: %s is writable by group or others (mode %o)", t.dir, rp.path, st.Mode&0o7777)
		}
		entries = append(entries, rootEntry{Path: rp.path, Dir: kind == unix.S_IFDIR})
		fds = append(fds, fd)
	}
	return entries, fds, nil
}

func kindName(kind uint32) string {
	switch kind {
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	}
	return "a special file"
}

func wantName(rp rootPath) string {
	switch {
	case rp.either:
		return "directory or regular file"
	case rp.dir:
		return "directory"
	}
	return "regular file"
}

// rootSources are what the supervisor hands the init of a sandbox with a
// root: detached clones of each entry's mount, made here in the host's
// mount namespace (a descriptor alone cannot be bound across mount
// namespaces), or, rootless, only the root's path: the init opens and
// resolves it itself, in the same way.
type rootSources struct {
	entries  []rootEntry
	trees    []*os.File
	initPath string
}

func openRootSources(root string, p *Programs, reserved []string) (*rootSources, error) {
	t, err := openRootTree(root)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	paths, err := rootPathsIn(t, p, reserved)
	if err != nil {
		return nil, err
	}
	entries, fds, err := openRootEntries(t, paths)
	if err != nil {
		return nil, err
	}
	src := &rootSources{entries: entries}
	for i, fd := range fds {
		tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		if err == nil {
			src.trees = append(src.trees, os.NewFile(uintptr(tree), entries[i].Path))
			continue
		}
		closeAll(src.trees...)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if errors.Is(err, unix.EPERM) && i == 0 {
			return &rootSources{initPath: root}, nil
		}
		return nil, fmt.Errorf("jail: root %s: clone %s: %w", root, entries[i].Path, err)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return src, nil
}

// fdRoot is the init's descriptor of the first detached root mount.
func fdRoot(cfg *initConfig) int { return fdBinds + len(cfg.Binds) }

// openInitRoot opens the root's entries in the init (rootless): its own
// descriptors, in its own mount namespace, which it may bind.
func openInitRoot(cfg *initConfig) ([]rootEntry, []int, error) {
	fd, err := unix.Open(cfg.RootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open root %s: %w", cfg.RootPath, err)
	}
	t := &rootTree{dir: cfg.RootPath, fd: fd}
	defer t.Close()
	paths, err := rootPathsIn(t, cfg.Programs, reservedPaths(cfg.Home, cfg.ReadOnlyBinds, cfg.Binds))
	if err != nil {
		return nil, nil, err
	}
	return openRootEntries(t, paths)
}

// placeRoot puts the root's entries in the sandbox's root: each symlink
// as it is (it resolves inside the sandbox, never on the host), each
// mount read-only, nosuid and nodev. openFDs are the init's own
// descriptors (rootless), else the detached mounts start at fdRoot.
func placeRoot(cfg *initConfig, entries []rootEntry, openFDs []int) error {
	cfg.rootPlaced = entries
	k := 0
	for _, e := range entries {
		dst := newRoot + e.Path
		if e.Link != "" {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(e.Link, dst); err != nil {
				return fmt.Errorf("root: link %s: %w", e.Path, err)
			}
			continue
		}
		var err error
		if openFDs != nil {
			err = bindWith("/proc/self/fd/"+strconv.Itoa(openFDs[k]), dst, roFlags)
		} else {
			err = attachTree(fdRoot(cfg)+k, dst, e.Dir)
		}
		if err != nil {
			return fmt.Errorf("root: %s: %w", e.Path, err)
		}
		k++
	}
	return nil
}

// attachTree mounts the detached mount at treeFD on dst, read-only,
// nosuid and nodev, submounts included.
func attachTree(treeFD int, dst string, dir bool) error {
	if err := makeMountPoint(dst, dir); err != nil {
		return err
	}
	if err := unix.MoveMount(treeFD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return err
	}
	_ = unix.Close(treeFD)
	return unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: roFlags})
}

// RootMounts resolves what a sandbox of spec takes from spec.Root (the
// system directories, /etc entries and the root's other top-level
// directories, or the files of spec.Programs, a command jail's, from
// ResolveProgramsIn) safely: each path is opened beneath the root, and its
// Source is the real path of what was opened, checked to lie beneath the
// root and to lead, with no symlink on the way, to that same file.
func RootMounts(spec Spec) ([]RootMount, error) {
	root, p := spec.Root, spec.Programs
	t, err := openRootTree(root)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	base, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(t.fd))
	if err != nil {
		return nil, err
	}
	paths, err := rootPathsIn(t, p, reservedPaths(spec.Home, spec.ReadOnlyBinds, spec.Binds))
	if err != nil {
		return nil, err
	}
	entries, fds, err := openRootEntries(t, paths)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	out := make([]RootMount, 0, len(entries))
	k := 0
	for _, e := range entries {
		if e.Link != "" {
			out = append(out, RootMount{Path: e.Path, Link: e.Link})
			continue
		}
		src, err := sourceBeneath(base, fds[k])
		if err != nil {
			return nil, fmt.Errorf("jail: root %s: %s: %w", root, e.Path, err)
		}
		k++
		out = append(out, RootMount{Path: e.Path, Source: src, Dir: e.Dir})
	}
	return out, nil
}

// sourceBeneath is the host path of fd, which must lie beneath base and
// lead, resolved with no symlink at all, to the very same file.
func sourceBeneath(base string, fd int) (string, error) {
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(real, base+"/") {
		return "", fmt.Errorf("resolves to %q, outside the root", real)
	}
	again, err := unix.Openat2(unix.AT_FDCWD, real, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return "", fmt.Errorf("reopen %s: %w", real, err)
	}
	defer unix.Close(again)
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return "", err
	}
	if err := unix.Fstat(again, &b); err != nil {
		return "", err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return "", fmt.Errorf("%s changed while it was resolved", real)
	}
	return real, nil
}
