package files

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// The file API reaches a session's filesystem as its code sees it: the
// workspace at its home, its /tmp, and the read-only system tree its
// sandbox shows (/usr, /lib, ..., /etc/alternatives). Each is a host
// directory shown at a path of the sandbox (a mount). A path is resolved
// in the sandbox's terms, a component at a time: a symlink is followed by
// looking its target up among the mounts again, never on the host, so a
// link the code plants to /etc/shadow leads to the sandbox's /etc/shadow
// (which the view does not hold), never the host's. Within a mount, wsfs
// resolves beneath its directory, so a link swapped in later cannot lead
// out of it either. Only the workspace and /tmp are writable, and a
// machine session's own / (what is not a system directory).

// mount is a host directory shown at a path of the sandbox.
type mount struct {
	at   string // where the sandbox sees it: "/home/user", "/tmp", "/usr"
	host string // the host directory ("" for a link)
	// link: the sandbox shows a symlink at `at`, to this (Debian's /bin
	// is usr/bin).
	link      string
	writable  bool
	workspace bool // the session's workspace: its quota applies
	// live: read through the running sandbox (Session.OpenRootDir), at
	// this path of its tree; host is what is read when it is not running.
	live string
}

// view is a session's filesystem as the file API reaches it.
type view struct {
	home   string
	mounts []mount // longest path first
	// noTmp says why /tmp is not reachable ("" when it is).
	noTmp string
	// ownRoot: a machine's own / is a mount of the view, where
	// /workspace is a directory like any other, not the home's alias.
	ownRoot bool
}

// systemTree is the read-only part of every view on the host's root,
// read once: the host's system directories as the sandbox shows them.
var systemTree = sync.OnceValue(func() []mount { return systemTreeIn("", "") })

// systemTreeIn is the read-only part of a view on root (an environment's
// root filesystem; "": the host's): each system directory the sandbox
// shows, at root+dir on the host. A directory of a root is found without
// following its links on the host (wsfs.LstatIn): a link is shown as the link
// it is, its target looked up among the view's mounts, never the host's.
// A root's other top-level directories (/app, /opt/...) follow, as the
// sandbox of a session with home shows them (fleet.RootTopLevel).
func systemTreeIn(root, home string) []mount {
	var out []mount
	for _, dir := range fleet.SystemTree() {
		host := dir
		var fi os.FileInfo
		var err error
		if root == "" {
			fi, err = os.Lstat(dir)
		} else {
			host = filepath.Join(root, dir)
			fi, err = wsfs.LstatIn(root, dir)
		}
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if target, err := os.Readlink(host); err == nil {
				out = append(out, mount{at: dir, link: target})
			}
			continue
		}
		if fi.IsDir() {
			out = append(out, mount{at: dir, host: host})
		}
	}
	if root == "" {
		return out
	}
	// The sandbox would not start on a root refused here: no more to show.
	top, _, _ := fleet.RootTopLevel(root, home)
	for _, m := range top {
		if m.Link != "" {
			out = append(out, mount{at: m.Path, link: m.Link})
		} else if m.Dir {
			out = append(out, mount{at: m.Path, host: filepath.Join(root, m.Path)})
		}
	}
	return out
}

// viewOf is se's filesystem.
func viewOf(se *session.Session) *view {
	dir, _, _, _ := se.Workspace()
	v := &view{home: se.Home()}
	v.mounts = append(v.mounts, mount{at: v.home, host: dir, writable: true, workspace: true})
	if tmp := se.Tmp(); tmp != "" {
		v.mounts = append(v.mounts, mount{at: "/tmp", host: tmp, writable: true})
	} else if se.MachineRoot() == "" {
		v.noTmp = "a " + se.Backend() + " session's /tmp is inside its sandbox's own memory, which the file API does not reach; use " + v.home
	} // else a directory of the machine's own root (a gVisor machine's)
	if root := se.Environment().RootDir; root != "" {
		v.mounts = append(v.mounts, systemTreeIn(root, v.home)...)
	} else {
		v.mounts = append(v.mounts, systemTree()...)
	}
	if own := se.MachineRoot(); own != "" {
		// A machine's own /, under everything else: what its code
		// made at the top of its tree (/workspace, /app), and its /etc.
		v.mounts = append(v.mounts, mount{at: "/", host: own, writable: true})
		v.ownRoot = true
		if fleet.MachineEtcIsKept(own) {
			// Its /etc and /usr are overlays of root's changes over what
			// codecage wrote in its root's etc and the host's /usr: read
			// as its code sees them while it runs, else the lower layers.
			// Writes are root's, through sudo: one here would go under
			// the overlay (or into the host's /usr), unseen.
			v.mounts = append(v.mounts, mount{at: "/etc", host: filepath.Join(own, "etc"), live: "/etc"})
			for i := range v.mounts {
				if v.mounts[i].at == "/usr" {
					v.mounts[i].live = "/usr"
				}
			}
		}
	}
	sort.SliceStable(v.mounts, func(i, j int) bool { return len(v.mounts[i].at) > len(v.mounts[j].at) })
	return v
}

// spot is a path of the sandbox resolved to the mount that holds it.
type spot struct {
	m   *mount // nil for a directory made only of mount points
	rel string // relative to m's host directory ("." for itself)
	abs string // the path in the sandbox, its symlinks resolved
	// throughLast: the path's last component was a symlink, followed. A
	// write then needs the target's directory to exist, as a kernel's
	// open(O_CREAT) through a link does: it makes no parents for it.
	throughLast bool
}

// virtual: the spot is a directory the sandbox has only as the parent of
// mounts ("/", "/home", "/etc").
func (sp spot) virtual() bool { return sp.m == nil }

// shown names rel (relative to m) for a caller: relative to the
// workspace as the file API always named its files, absolute elsewhere.
func (m *mount) shown(rel string) string {
	if m.workspace {
		return rel
	}
	if rel == "." || rel == "" {
		return m.at
	}
	return path.Join(m.at, rel) // a machine's own / is "/"
}

// absolute turns what a caller gives ("data.csv", "/home/user/a",
// "/workspace/a", "/tmp/x") into a clean absolute path of the sandbox; a
// relative path is relative to the home and may not leave it.
func (v *view) absolute(p string) (string, error) {
	if p == "" || len(p) > 4096 || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: %s", errdefs.ErrBadPath, bounded.Quote(p))
	}
	if !strings.HasPrefix(p, "/") {
		clean := path.Clean(p)
		if clean == ".." || strings.HasPrefix(clean, "../") {
			return "", fmt.Errorf("%w: %s leaves the workspace", errdefs.ErrBadPath, bounded.Quote(p))
		}
		return path.Join(v.home, clean), nil
	}
	p = path.Clean(p)
	// /workspace names the workspace wherever the home is (the file API's
	// older name for it), but in a machine's own root.
	if rest, ok := strings.CutPrefix(p, fleet.WorkspaceDir); ok && (rest == "" || rest[0] == '/') && !v.ownRoot {
		p = v.home + rest
	}
	return p, nil
}

// lookup is the mount holding abs and abs relative to it.
func (v *view) lookup(abs string) (*mount, string) {
	for i := range v.mounts {
		m := &v.mounts[i]
		if m.at == "/" && kernelView(abs) {
			continue // a machine's root holds only their mount points
		}
		if abs == m.at {
			return m, "."
		}
		if rest, ok := strings.CutPrefix(abs, strings.TrimSuffix(m.at, "/")+"/"); ok {
			return m, rest
		}
	}
	return nil, ""
}

// kernelView: abs is in the sandbox's /proc or /dev, which its kernel
// shows and the file API does not reach.
func kernelView(abs string) bool {
	for _, d := range []string{"/proc", "/dev", "/sys"} {
		if abs == d || strings.HasPrefix(abs, d+"/") {
			return true
		}
	}
	return false
}

// isParent: abs is "/" or a directory above a mount.
func (v *view) isParent(abs string) bool {
	prefix := strings.TrimSuffix(abs, "/") + "/"
	for _, m := range v.mounts {
		if strings.HasPrefix(m.at, prefix) {
			return true
		}
	}
	return false
}

// children are the names of the mount points right below a virtual
// directory, with their mounts.
func (v *view) children(abs string) []*mount {
	prefix := strings.TrimSuffix(abs, "/") + "/"
	seen := map[string]bool{}
	var out []*mount
	for i := range v.mounts {
		m := &v.mounts[i]
		rest, ok := strings.CutPrefix(m.at, prefix)
		if !ok {
			continue
		}
		name, _, deeper := strings.Cut(rest, "/")
		if seen[name] {
			continue
		}
		seen[name] = true
		if deeper {
			out = append(out, &mount{at: prefix + name}) // another virtual directory
		} else {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// outside is the refusal of a path the view does not hold.
func (v *view) outside(p, abs string) error {
	if (abs == "/tmp" || strings.HasPrefix(abs, "/tmp/")) && v.noTmp != "" {
		return fmt.Errorf("%w: %s: %s", errdefs.ErrBadPath, bounded.Quote(p), v.noTmp)
	}
	return fmt.Errorf("%w: %s is outside what the file API reaches (%s, /tmp and the sandbox's read-only system tree)", errdefs.ErrBadPath, bounded.Quote(p), v.home)
}

// resolve finds where p is: its symlinks resolved in the sandbox's terms
// (the last one too when follow), at most maxLinkHops of them.
func (v *view) resolve(p string, follow bool) (spot, error) {
	abs, err := v.absolute(p)
	if err != nil {
		return spot{}, err
	}
	last := false
	for range maxLinkHops {
		m, rel := v.lookup(abs)
		if m == nil {
			if v.isParent(abs) {
				return spot{abs: abs, throughLast: last}, nil
			}
			return spot{}, v.outside(p, abs)
		}
		var link, target string
		if m.link != "" {
			if rel == "." && !follow {
				return spot{m: m, rel: ".", abs: abs, throughLast: last}, nil
			}
			link, target = ".", m.link
		} else {
			r, err := wsfs.Open(m.host)
			if err != nil {
				return spot{}, fmt.Errorf("%w: %s: %v", errdefs.ErrUnavailable, m.at, err)
			}
			link, target, err = r.FirstLink(rel)
			r.Close()
			if err != nil {
				return spot{}, fileError(p, err)
			}
			if link == "" || (link == rel && !follow) {
				if err := othersMay(m, rel, true); err != nil {
					return spot{}, fileError(p, err)
				}
				return spot{m: m, rel: rel, abs: abs, throughLast: last}, nil
			}
			if err := othersMay(m, link, false); err != nil {
				return spot{}, fileError(p, err)
			}
		}
		// The link's parents are real directories: its target, joined to
		// where the link is, names the same place the kernel would.
		linkAbs := m.at
		if link != "." {
			linkAbs = m.at + "/" + link
		}
		rest := strings.TrimPrefix(strings.TrimPrefix(abs, linkAbs), "/")
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(linkAbs), target)
		}
		abs, last = path.Join(path.Clean(target), rest), rest == ""
	}
	return spot{}, fmt.Errorf("%w: %s passes through too many symlinks", errdefs.ErrBadPath, bounded.Quote(p))
}
