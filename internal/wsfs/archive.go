package wsfs

import (
	"errors"
	"fmt"
	"strconv"
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
