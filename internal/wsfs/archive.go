package wsfs

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ArchiveLimits bound an archive and an unpack; a zero field allows
// nothing (defaults closed: the caller states its limits).
type ArchiveLimits struct {
	// MaxBytes caps the file content, in all.
	MaxBytes int64
	// MaxEntries caps the entries: directories, files and links (and, in
	// Archive, every entry seen, the skipped ones included, so that a
	// directory of a million FIFOs costs no more than a million files).
	MaxEntries int
	// MaxDepth caps how many levels below the root an entry is ("a" is at
	// level 1, "a/b" at 2).
	MaxDepth int
	// Metadata bounds the user.e2b.* attributes a file carries through
	// (as PAX records); zero carries none.
	Metadata MetaLimits
	// Whiteouts carries an overlay's upper layer through (a machine's
	// root): its whiteouts, character devices 0/0, and its opaque
	// directories (user.overlay.opaque, as a PAX record). Any other
	// device is still left out, and refused when unpacked.
	Whiteouts bool
	// Owners carries owners other than the directory's own through, for
	// a machine with root inside, whose root and users own files of its
	// block of ids: Archive records each entry's uid and gid as offsets
	// from the directory owner's (a PAX record) when both lie in the
	// window, and Unpack applies them to its uid when given the window
	// (the target has a block too); everything else is the uid's, as
	// without it.
	Owners OwnerWindow
}

// OwnerWindow is the offsets from a directory owner's id that an owner
// may have in ArchiveLimits.Owners: [Min, Max); zero is no window.
type OwnerWindow struct{ Min, Max int }

func (w OwnerWindow) holds(d int) bool { return w.Max > w.Min && d >= w.Min && d < w.Max }

// paxOwner is the PAX record of an entry's owner ("uid:gid" offsets).
const paxOwner = "CODECAGE.owner"

// paxOpaque is the PAX record of an opaque directory of an overlay's
// upper layer (mounted with userxattr, as a machine's are).
const paxOpaque = "SCHILY.xattr." + overlayOpaque

// overlayOpaque is the attribute an unprivileged overlay marks an opaque
// directory with.
const overlayOpaque = "user.overlay.opaque"

// paxMetadata prefixes a PAX record that holds an extended attribute
// (the form GNU tar and libarchive read).
const paxMetadata = "SCHILY.xattr." + MetadataPrefix

// keepMetadata is md within lim, keeping only what a write of metadata
// could store: keys of HTTP token characters, values of printable ASCII
// (the code may set any bytes; they are left out). Keys are taken in
// order, so the same attributes give the same archive.
func keepMetadata(md map[string]string, lim MetaLimits) map[string]string {
	if len(md) == 0 || lim.Keys <= 0 {
		return nil
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out map[string]string
	used := 0
	for _, k := range keys {
		v := md[k]
		if len(out) >= lim.Keys || used+len(k)+len(v) > lim.Bytes || !metaKeyOK(k) || !metaValueOK(v) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
		used += len(k) + len(v)
	}
	return out
}

// metaKeyOK: 1 to 128 HTTP token characters (RFC 9110), as a write's
// metadata keys are (never "=", which a PAX record's key cannot hold).
func metaKeyOK(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func metaValueOK(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// ArchiveReport says what an archive holds and what it left out.
type ArchiveReport struct {
	// Entries and Bytes are what the archive holds.
	Entries int
	Bytes   int64
	// Skipped names (quoted, capped: at most maxSkipped of them) what was
	// left out: FIFOs, sockets, devices, entries that changed kind while
	// they were read; SkippedCount counts them all.
	Skipped      []string
	SkippedCount int
}

var (
	// ErrArchiveLimit: a tree or an archive is past its ArchiveLimits.
	ErrArchiveLimit = errors.New("archive limit exceeded")
	// ErrUnsafeEntry: an archive entry that Unpack refuses.
	ErrUnsafeEntry = errors.New("unsafe archive entry")
)

const (
	maxSkipped = 100
	// maxQuoted caps a name (written by the sandboxed code) in a report or
	// an error.
	maxQuoted = 128
)

// quoteName quotes a name for a report or an error, capped.
func quoteName(name string) string {
	if len(name) <= maxQuoted {
		return strconv.Quote(name)
	}
	return strconv.Quote(name[:maxQuoted]) + fmt.Sprintf("...(%d bytes)", len(name))
}

func (r *ArchiveReport) skip(name, why string) {
	r.SkippedCount++
	if len(r.Skipped) < maxSkipped {
		r.Skipped = append(r.Skipped, quoteName(name)+" ("+why+")")
	}
}
