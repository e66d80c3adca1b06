package service

import (
	"io/fs"
	"path"
	"strings"

	"github.com/codecage/codecage/internal/wsfs"
)

// LinkEnd is what a symlink of a workspace leads to.
type LinkEnd struct {
	// Path is the target's absolute path in the sandbox, its links resolved.
	Path string
	Dir  bool
	// Mode is the target's permission bits.
	Mode uint32
}

// maxLinkHops bounds a chain of links, as the kernel's 40 do.
const maxLinkHops = 40

// resolveLink follows the symlink at rel (relative to the workspace, seen
// at home in the sandbox) as the sandbox would, but only inside the
// workspace: a link that dangles, loops, or leads out of it (the host
// beyond the workspace is never looked at) gives nil.
func resolveLink(r *wsfs.Root, home, rel string) *LinkEnd {
	cur := rel
	for range maxLinkHops {
		e, err := r.Lstat(cur)
		if err != nil {
			return nil
		}
		if e.Mode&fs.ModeSymlink == 0 {
			// Its real place: the links among its parents resolved too.
			real, err := r.Resolve(cur)
			if err != nil {
				return nil
			}
			return &LinkEnd{Path: inSandbox(home, real), Dir: e.Mode.IsDir(), Mode: uint32(e.Mode.Perm())}
		}
		target := e.Target
		if !path.IsAbs(target) {
			target = path.Join(inSandbox(home, path.Dir(cur)), target)
		}
		target = path.Clean(target)
		switch {
		case target == home:
			cur = "."
		case strings.HasPrefix(target, home+"/"):
			cur = strings.TrimPrefix(target, home+"/")
		default:
			return nil // out of the workspace
		}
	}
	return nil
}

// inSandbox is rel (relative to the workspace) as the sandbox sees it.
func inSandbox(home, rel string) string {
	if rel == "." || rel == "" {
		return home
	}
	return home + "/" + rel
}
