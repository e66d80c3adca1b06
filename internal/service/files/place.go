package files

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
	"github.com/codecage/codecage/internal/wsfs"
)

// opened is a path of a session's filesystem, resolved, with its mount's
// directory open (r is nil for a virtual directory or a mount that is a
// symlink).
type opened struct {
	spot
	r  *wsfs.Root
	se *session.Session
	v  *view
}

func (o *opened) Close() {
	if o.r != nil {
		o.r.Close()
	}
}

// open resolves p in se's filesystem (its last symlink followed when
// follow) and opens its mount. write refuses a path the sandbox has
// read-only, with ErrPermission.
func open(se *session.Session, p string, follow, write bool) (*opened, error) {
	v := viewOf(se)
	sp, err := v.resolve(p, follow)
	if err != nil {
		if write && errdefs.ErrorKind(err) == errdefs.KindBadPath && !errors.Is(err, errdefs.ErrPermission) {
			if abs, aerr := v.absolute(p); aerr == nil && !v.underWritable(abs) {
				return nil, v.readOnly(p)
			}
		}
		return nil, err
	}
	if write && (sp.virtual() || !sp.m.writable) {
		return nil, v.readOnly(p)
	}
	o := &opened{spot: sp, se: se, v: v}
	if sp.virtual() || sp.m.link != "" && sp.rel == "." {
		return o, nil
	}
	if sp.m.live != "" {
		if o.r = openLive(se, sp.m.live); o.r != nil {
			return o, nil
		}
	}
	if o.r, err = wsfs.Open(sp.m.host); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errdefs.ErrUnavailable, sp.m.at, err)
	}
	return o, nil
}

// openLive opens dir of se's running sandbox as its code sees it, or nil
// (not running, or not reachable: the caller reads the mount's host side).
func openLive(se *session.Session, dir string) *wsfs.Root {
	f, err := se.OpenRootDir(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	r, err := wsfs.Open(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return nil
	}
	return r
}

// underWritable: abs lies in a writable mount (before links are followed).
func (v *view) underWritable(abs string) bool {
	m, _ := v.lookup(abs)
	return m != nil && m.writable
}

func (v *view) readOnly(p string) error {
	writable := v.home + " and /tmp"
	if v.noTmp != "" {
		writable = v.home
	}
	return fmt.Errorf("%w: %s is read-only in the sandbox (only %s are writable)", errdefs.ErrPermission, bounded.Quote(p), writable)
}

// shown names rel of o's mount for the caller.
func (o *opened) shown(rel string) string { return o.m.shown(rel) }

// metaLimits bound the metadata read from one file.
var metaLimits = wsfs.MetaLimits{Keys: MaxMetadataKeys, Bytes: 2 * MaxMetadataBytes}

// stat describes o (a symlink is described, not followed).
func (o *opened) stat() (*FileInfo, error) {
	switch {
	case o.virtual():
		return &FileInfo{Path: o.abs, Dir: true, Mode: 0o755}, nil
	case o.r == nil: // a mount that is a symlink (/bin)
		return &FileInfo{Path: o.abs, Symlink: true, Mode: 0o777, Target: o.m.link, Link: o.v.linkEnd(o.abs)}, nil
	}
	e, err := o.r.Lstat(o.rel)
	if err != nil {
		return nil, fileError(o.abs, err)
	}
	info := fileInfo(e)
	info.Path = o.shown(o.rel)
	if info.Symlink {
		info.Link = o.v.linkEnd(o.abs)
	} else if o.m.writable {
		info.Metadata, _ = o.r.Metadata(o.rel, metaLimits)
	}
	return &info, nil
}

// list lists below o, depth levels deep (0: all, up to MaxListDepth),
// within the listing's bounds.
func (o *opened) list(ctx context.Context, depth int) (*FileList, error) {
	lim := wsfs.ListLimits{Depth: depth, Entries: MaxListedFiles, Bytes: MaxListBytes}
	if depth == 0 {
		lim.Depth, lim.MarkDeeper = MaxListDepth, true
	}
	out := &FileList{}
	if o.r == nil && !o.virtual() {
		return nil, fmt.Errorf("%w: %q is not a directory", errdefs.ErrBadPath, o.abs)
	}
	err := o.v.listInto(ctx, out, o.spot, o.r, lim)
	return out, err
}

// listInto adds what is below sp (whose mount r has open) to out. A
// mount below sp (a machine's /usr, its home, under its own /) hides what
// its mount point holds, as in the sandbox: its own tree is listed there.
func (v *view) listInto(ctx context.Context, out *FileList, sp spot, r *wsfs.Root, lim wsfs.ListLimits) error {
	if sp.virtual() {
		for _, m := range v.children(sp.abs) {
			if err := v.addMount(ctx, out, m, lim); err != nil {
				return err
			}
		}
		return nil
	}
	l, err := r.List(ctx, sp.rel, lim)
	if err != nil {
		return fileError(sp.abs, err)
	}
	out.Truncated = out.Truncated || l.Truncated
	if sp.m.system() {
		l.Entries = readableByOthers(l.Entries)
	}
	subs := v.mountsBelow(sp, lim.Depth)
	metaBytes := 0
	for _, e := range l.Entries {
		abs := path.Join(sp.m.at, e.Path)
		if coveredBy(abs, subs) {
			continue
		}
		info := fileInfo(e)
		info.Path = sp.m.shown(e.Path)
		if info.Symlink {
			info.Link = v.linkEnd(abs)
		} else if sp.m.writable && metaBytes < MaxListBytes {
			info.Metadata, _ = r.Metadata(e.Path, metaLimits)
			for k, val := range info.Metadata {
				metaBytes += len(k) + len(val)
			}
		}
		out.Files = append(out.Files, info)
	}
	for _, m := range subs {
		// m's entry is that many levels below sp: list as deep below it
		// as the rest of the depth allows.
		at := lim
		at.Depth -= strings.Count(strings.TrimPrefix(m.at, strings.TrimSuffix(sp.abs, "/")+"/"), "/")
		if err := v.addMount(ctx, out, m, at); err != nil {
			return err
		}
	}
	return nil
}

// addMount adds m's own entry to out and, lim.Depth > 1, what is below it.
func (v *view) addMount(ctx context.Context, out *FileList, m *mount, lim wsfs.ListLimits) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(out.Files) >= lim.Entries {
		out.Truncated = true
		return nil
	}
	sub := lim
	sub.Depth--
	sub.Entries = lim.Entries - len(out.Files) - 1
	child := spot{m: m, rel: ".", abs: m.at}
	switch {
	case m.host == "" && m.link == "": // another virtual directory
		out.Files = append(out.Files, FileInfo{Path: m.at, Dir: true, Mode: 0o755})
		if lim.Depth > 1 {
			child.m = nil
			return v.listInto(ctx, out, child, nil, sub)
		}
		return nil
	case m.link != "":
		out.Files = append(out.Files, FileInfo{Path: m.at, Symlink: true, Mode: 0o777, Target: m.link, Link: v.linkEnd(m.at)})
		return nil
	}
	cr, err := wsfs.Open(m.host)
	if err != nil {
		return nil
	}
	defer cr.Close()
	e, err := cr.Lstat(".")
	if err != nil {
		return nil
	}
	info := fileInfo(e)
	info.Path = m.at
	out.Files = append(out.Files, info)
	if lim.Depth > 1 && othersMay(m, ".", true) == nil {
		return v.listInto(ctx, out, child, cr, sub)
	}
	return nil
}

// mountsBelow are the mounts strictly below sp's path, within depth
// levels of it, that no other of them holds (those are listed with the
// one that does).
func (v *view) mountsBelow(sp spot, depth int) []*mount {
	prefix := strings.TrimSuffix(sp.abs, "/") + "/"
	var below []*mount
	for i := range v.mounts {
		m := &v.mounts[i]
		rest, ok := strings.CutPrefix(m.at, prefix)
		if !ok || m == sp.m || strings.Count(rest, "/")+1 > depth {
			continue
		}
		below = append(below, m)
	}
	var out []*mount
	for _, m := range below {
		if !coveredBy(path.Dir(m.at), below) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// coveredBy: abs is at or below one of the mounts.
func coveredBy(abs string, mounts []*mount) bool {
	for _, m := range mounts {
		if abs == m.at || strings.HasPrefix(abs, strings.TrimSuffix(m.at, "/")+"/") {
			return true
		}
	}
	return false
}

// describe is the FileInfo of rel in o's mount, for answers after a
// change (write, move, mkdir).
func (o *opened) describe(rel string) (*FileInfo, error) {
	at := *o
	at.rel, at.abs = rel, path.Join(o.m.at, rel)
	return at.stat()
}
