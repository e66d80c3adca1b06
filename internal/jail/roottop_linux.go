package jail

import (
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// An image puts files in top-level directories of its own (/app, /opt,
// /srv: `COPY app.py /app/`), which a sandbox from it shows read-only as
// it shows the system directories. Bounds keep a hostile root from making
// a sandbox of thousands of mounts.
const (
	// MaxRootTopDirs caps the other top-level entries taken from a root.
	MaxRootTopDirs = 32
	// maxRootSplice caps the entries taken from one directory the jail
	// mounts something of its own beneath (see spliced).
	maxRootSplice = 32
	// maxRootScan caps the names read from one directory of the root.
	maxRootScan = 4096
	maxRootName = 64
)

// rootOwnTop are top-level names never taken from a root: the sandbox
// builds them itself (etc, dev, proc, tmp, the home), or what an image
// has there must not reach the sandbox (sys, run, var, boot, mnt, ...).
var rootOwnTop = []string{"etc", "dev", "proc", "sys", "tmp", "run", "var", "home", "root", "workspace",
	"mnt", "media", "boot", "lost+found"}

// jailOwnedPaths lie in a root's top-level directories but are the
// sandbox's own: the harness's packages are bound at /opt/codecage/...
var jailOwnedPaths = []string{"/opt/codecage"}

// plainRootName refuses a top-level name that is no plain word: dots
// (".", "..", hidden names), control characters, slashes, long names.
func plainRootName(name string) error {
	if name == "" || len(name) > maxRootName {
		return fmt.Errorf("name of %d bytes (at most %d)", len(name), maxRootName)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '+') {
			return fmt.Errorf("%q is not a plain name (letters, digits, '_', '-', '+')", name)
		}
	}
	return nil
}

// reservedPaths are the paths a sandbox of spec mounts itself, beneath
// which nothing of a root may be placed.
func reservedPaths(home string, roBinds []string, binds []Bind) []string {
	out := append([]string{HomeOf(home)}, jailOwnedPaths...)
	out = append(out, roBinds...)
	for _, b := range binds {
		out = append(out, b.Path)
	}
	return out
}

// rootExtraPaths lists what a sandbox takes from the root besides its
// system directories: every other top-level directory (or symlink, which
// is recreated as it is), in name order, up to MaxRootTopDirs. A
// top-level directory above one of reserved (/opt for /opt/codecage/site)
// is spliced: it is made in the sandbox and each of its entries but the
// one the sandbox owns is taken from the root instead. skipped says, per
// entry left out, why.
func rootExtraPaths(t *rootTree, reserved []string) (out []rootPath, skipped []string, err error) {
	names, more, err := t.names(".")
	if err != nil {
		return nil, nil, fmt.Errorf("jail: root %s: %w", t.dir, err)
	}
	if more {
		skipped = append(skipped, fmt.Sprintf("/: more than %d entries, the rest not read", maxRootScan))
	}
	taken := 0
	for _, name := range names {
		if slices.Contains(rootOwnTop, name) || slices.Contains(hostSystemDirs, "/"+name) {
			continue
		}
		if err := plainRootName(name); err != nil {
			skipped = append(skipped, "/"+name+": "+err.Error())
			continue
		}
		p := "/" + name
		if owned(p, reserved) {
			continue
		}
		if taken == MaxRootTopDirs {
			skipped = append(skipped, fmt.Sprintf("%s: more than %d top-level directories", p, MaxRootTopDirs))
			continue
		}
		if !above(p, reserved) {
			out = append(out, rootPath{path: p, dir: true, link: true, optional: true})
			taken++
			continue
		}
		sub, subSkipped, err := splicedPaths(t, p, reserved)
		if err != nil {
			return nil, nil, err
		}
		out, skipped = append(out, sub...), append(skipped, subSkipped...)
		taken++
	}
	return out, skipped, nil
}

// splicedPaths are dir's entries, each a directory, file or symlink of
// the root, but those the sandbox mounts itself.
func splicedPaths(t *rootTree, dir string, reserved []string) (out []rootPath, skipped []string, err error) {
	fd, err := t.openAt(dir, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return nil, nil, nil // none there: the sandbox makes dir itself
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// A symlink or file where the sandbox mounts its own: the
		// sandbox's wins, the root's is left out.
		return nil, []string{dir + ": the sandbox mounts its own beneath it"}, nil
	}
	names, more, err := t.names(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("jail: root %s: %s: %w", t.dir, dir, err)
	}
	if more {
		skipped = append(skipped, fmt.Sprintf("%s: more than %d entries, the rest not read", dir, maxRootScan))
	}
	for _, name := range names {
		p := dir + "/" + name
		if owned(p, reserved) || above(p, reserved) {
			continue // the sandbox's own, whole
		}
		if err := plainRootName(strings.ReplaceAll(name, ".", "_")); err != nil || strings.HasPrefix(name, ".") {
			skipped = append(skipped, p+": not a plain name")
			continue
		}
		if len(out) == maxRootSplice {
			skipped = append(skipped, fmt.Sprintf("%s: more than %d entries in %s", p, maxRootSplice, dir))
			continue
		}
		out = append(out, rootPath{path: p, either: true, link: true, optional: true})
	}
	return out, skipped, nil
}

// owned: p is one of reserved or lies beneath one.
func owned(p string, reserved []string) bool {
	for _, r := range reserved {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// above: one of reserved lies beneath p.
func above(p string, reserved []string) bool {
	for _, r := range reserved {
		if strings.HasPrefix(path.Clean(r), p+"/") {
			return true
		}
	}
	return false
}

// names reads up to maxRootScan names of directory p of the root, sorted;
// more says there were others.
func (t *rootTree) names(p string) (names []string, more bool, err error) {
	f, err := t.ReadDirFile(p)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	names, err = f.Readdirnames(maxRootScan)
	if err == io.EOF {
		err = nil
	}
	if err != nil {
		return nil, false, err
	}
	if len(names) == maxRootScan {
		if extra, _ := f.Readdirnames(1); len(extra) > 0 {
			more = true
		}
	}
	slices.Sort(names)
	return names, more, nil
}

// RootTopLevel is what a sandbox from root shows of it besides the system
// directories (for a caller that shows the sandbox's files, with the
// paths the sandbox mounts itself: the home, the harness's /opt/codecage):
// each a directory, file or symlink (Link) at Path; Source is root+Path.
// skipped says, per entry left out, why.
func RootTopLevel(root, home string) (mounts []RootMount, skipped []string, err error) {
	t, err := openRootTree(root)
	if err != nil {
		return nil, nil, err
	}
	defer t.Close()
	paths, skipped, err := rootExtraPaths(t, reservedPaths(home, nil, nil))
	if err != nil {
		return nil, nil, err
	}
	entries, fds, err := openRootEntries(t, paths)
	if err != nil {
		return nil, nil, err
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	for _, e := range entries {
		m := RootMount{Path: e.Path, Link: e.Link, Dir: e.Dir}
		if e.Link == "" {
			m.Source = root + e.Path
		}
		mounts = append(mounts, m)
	}
	return mounts, skipped, nil
}
