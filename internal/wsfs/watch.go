package wsfs

import "errors"

// Op is what happened to an entry of a watched directory.
type Op uint8

// The operations of a watch's events, as inotify reports them.
const (
	OpCreate Op = iota + 1 // created, or moved in
	OpWrite                // its contents changed
	OpRemove               // removed
	OpRename               // moved away (its new name, if still watched, is a create)
	OpChmod                // its attributes changed
	// OpOverflow is no entry's: events were dropped (WatchEvent.Dropped
	// of them, or some parts of the tree are not watched), for Reason.
	OpOverflow
)

// WatchEvent is one change in a watched tree.
type WatchEvent struct {
	// Name is the entry's path relative to the watched directory ("." for
	// the directory itself).
	Name string
	Op   Op
	// Dropped and Reason describe an OpOverflow.
	Dropped int
	Reason  string
}

// WatchLimits bound a watch, whatever the sandboxed code does to the tree.
type WatchLimits struct {
	// Dirs caps the directories watched at once (a recursive watch adds
	// one inotify watch per directory, and those are host-wide).
	Dirs int
	// Events caps the events kept for the reader; past it, events are
	// dropped and counted in an OpOverflow.
	Events int
	// Scan caps the work of following the tree's new directories, in
	// directories watched plus 256-entry reads of a directory, per
	// second (a burst of twice that): a tree moved in and out in a loop
	// costs the code a rename each and the server a scan each.
	Scan int
}

// ErrWatchTooBig: a recursive watch of a tree with more directories than
// WatchLimits.Dirs.
var ErrWatchTooBig = errors.New("too many directories to watch")
