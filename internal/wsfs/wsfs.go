// Package wsfs reaches into a session's workspace from the host on behalf
// of the file API. Every path is resolved once, by the kernel, beneath the
// workspace's root (openat2 with RESOLVE_BENEATH), so an operation costs
// in proportion to the path it names, never to what the sandboxed code
// planted around it; walks (listing, usage, recursive removal) go from
// directory to directory by descriptor, are bounded, and stop when their
// context ends. It knows nothing of sessions or requests.
package wsfs

import (
	"errors"
	"io/fs"
	"time"
)

// ErrNotDir: a listing of something that is not a directory.
var ErrNotDir = errors.New("not a directory")

// Entry describes one entry of a workspace; a symlink is described, not
// followed.
type Entry struct {
	// Path is relative to the workspace root.
	Path    string
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	// Target is where a symlink points.
	Target string
}

// ListLimits bound a listing.
type ListLimits struct {
	// Depth is how many levels below the directory are listed (1: its
	// entries only); at least 1.
	Depth int
	// MarkDeeper: a directory at Depth that has entries makes the listing
	// truncated (the caller asked for everything, Depth is a cap).
	MarkDeeper bool
	// Entries and Bytes (of paths and symlink targets) cap the result.
	Entries int
	Bytes   int
}

// Listing is a directory's entries, parents before their children,
// each directory's entries in name order.
type Listing struct {
	Entries []Entry
	// Truncated: some entries were left out by the limits.
	Truncated bool
}

// MetadataPrefix names the extended attributes that hold a file's
// user-defined metadata, as E2B's envd stores it (user.e2b.<key>): code
// in the sandbox sees and may set them too, as in E2B's VM.
const MetadataPrefix = "user.e2b."

// MetaLimits bound the metadata read from one file: the code may set any
// number of attributes, of up to 64 KiB each.
type MetaLimits struct {
	Keys  int // attributes kept
	Bytes int // of keys and values together
}
