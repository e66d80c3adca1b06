package files

import (
	"io/fs"

	"github.com/codecage/codecage/internal/wsfs"
)

// LinkEnd is what a symlink of a session's filesystem leads to.
type LinkEnd struct {
	// Path is the target's absolute path in the sandbox, its links resolved.
	Path string
	Dir  bool
	// Mode is the target's permission bits.
	Mode uint32
}

// maxLinkHops bounds a chain of links, as the kernel's 40 do.
const maxLinkHops = 40

// linkEnd follows the symlink at abs as the sandbox would, within the
// view (the host beyond it is never looked at): nil when it dangles,
// loops, or leads out of what the view holds.
func (v *view) linkEnd(abs string) *LinkEnd {
	sp, err := v.resolve(abs, true)
	if err != nil {
		return nil
	}
	if sp.virtual() {
		return &LinkEnd{Path: sp.abs, Dir: true, Mode: 0o755}
	}
	r, err := wsfs.Open(sp.m.host)
	if err != nil {
		return nil
	}
	defer r.Close()
	e, err := r.Lstat(sp.rel)
	if err != nil || e.Mode&fs.ModeSymlink != 0 {
		return nil
	}
	return &LinkEnd{Path: sp.abs, Dir: e.Mode.IsDir(), Mode: uint32(e.Mode.Perm())}
}
