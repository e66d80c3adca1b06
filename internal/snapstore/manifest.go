package snapstore

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Kind says what a snapshot is for.
type Kind string

// The kinds.
const (
	KindPaused   Kind = "paused"   // a paused session, resumed under its session id
	KindSnapshot Kind = "snapshot" // a named snapshot new sessions start from
)

// FormatVersion is the manifest format this code writes and reads.
const FormatVersion = 1

// fileSetVersion is the format of a manifest with file sets (blobs named
// "set/file" with chunked MACs): an older reader refuses it by its
// version instead of misreading it.
const fileSetVersion = 2

// Manifest describes a snapshot. The caller fills what it knows; the store
// sets Version, ID (when empty), Created, Expires, Blobs and Size.
type Manifest struct {
	Version   int    `json:"version"`
	ID        string `json:"id"`
	Kind      Kind   `json:"kind"`
	Owner     string `json:"owner"`
	Name      string `json:"name,omitempty"` // a named snapshot's name, as its owner gave it
	SessionID string `json:"session_id"`
	// Backend is native or gvisor; RunscVersion and Platform are what a
	// gVisor image binds to (a restore refuses a mismatch).
	Backend      string   `json:"backend"`
	RunscVersion string   `json:"runsc_version,omitempty"`
	Platform     string   `json:"platform,omitempty"`
	UID          int64    `json:"uid"`
	Profiles     []string `json:"profiles,omitempty"`
	// Spec is the service's own description (environment, labels, the
	// sandbox's spec), opaque JSON to the store.
	Spec    json.RawMessage `json:"spec,omitempty"`
	Created time.Time       `json:"created"`
	// Expires is set by the store to Created + TTL; a caller may ask for
	// an earlier time.
	Expires time.Time `json:"expires"`
	// NotSaved names what could not be saved (generators, sockets...),
	// never silently dropped. The names come from sandboxed code: they are
	// capped (MaxNotSaved entries of MaxNameLen bytes), and a longer list
	// ends with an entry saying how many more there were.
	NotSaved []string   `json:"not_saved,omitempty"`
	Blobs    []BlobInfo `json:"blobs"`
	Size     int64      `json:"size"` // bytes of all blobs
}

// BlobInfo is one blob as sealed in the manifest.
type BlobInfo struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	MAC  string `json:"mac"` // hex HMAC-SHA256 of the blob's bytes, bound to owner, id and name
	// Chunk is the chunk size of a file set's file, whose MAC is chunked
	// (chunkmac.go); 0 for a plain blob.
	Chunk int64 `json:"chunk,omitempty"`
}

// Caps on what a manifest may hold.
const (
	MaxOwnerLen    = 256
	MaxIDLen       = 128
	MaxNameLen     = 256
	MaxFieldLen    = 256 // session id, backend, runsc version, platform, each profile
	MaxProfiles    = 32
	MaxSpecLen     = 64 << 10
	MaxNotSaved    = 1000
	MaxBlobs       = 64
	maxManifestLen = 1 << 20 // a sealed manifest read back; well above the caps' sum
)

// idPattern names ids and blob names: no separators, no leading dot, so no
// path can be made of one.
var (
	idPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	blobPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

func checkID(id string) error {
	if len(id) > MaxIDLen || !idPattern.MatchString(id) {
		return fmt.Errorf("%w: id %s: want 1 to %d letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, quoteCap(id), MaxIDLen)
	}
	return nil
}

func checkBlobName(name string) error {
	if !blobPattern.MatchString(name) {
		return fmt.Errorf("%w: blob name %s: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, quoteCap(name))
	}
	return nil
}

// checkSealedName checks a blob entry of a manifest: a plain blob, or a
// file of a file set ("set/file", chunked).
func checkSealedName(b BlobInfo) error {
	set, file, isFile := strings.Cut(b.Name, "/")
	if !isFile {
		if b.Chunk != 0 {
			return fmt.Errorf("%w: blob %s: a chunked MAC", ErrInvalid, quoteCap(b.Name))
		}
		return checkBlobName(b.Name)
	}
	if b.Chunk != fileChunk {
		return fmt.Errorf("%w: file %s: chunks of %d bytes", ErrInvalid, quoteCap(b.Name), b.Chunk)
	}
	if err := checkBlobName(set); err != nil {
		return err
	}
	return checkBlobName(file)
}

func checkOwner(owner string) error {
	if err := checkText("owner", owner, MaxOwnerLen); err != nil {
		return err
	}
	return nil
}

func checkKey(owner, id string) error {
	if err := checkOwner(owner); err != nil {
		return err
	}
	return checkID(id)
}

// checkText refuses over-long text, invalid UTF-8 and control characters.
func checkText(field, v string, max int) error {
	if len(v) > max {
		return fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalid, field, len(v), max)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s holds a control character", ErrInvalid, field)
		}
	}
	return nil
}

// checkManifest validates what the caller filled in.
func checkManifest(m *Manifest) error {
	if m.Kind != KindPaused && m.Kind != KindSnapshot {
		return fmt.Errorf("%w: kind %s: want %s or %s", ErrInvalid, quoteCap(string(m.Kind)), KindPaused, KindSnapshot)
	}
	if err := checkOwner(m.Owner); err != nil {
		return err
	}
	if m.ID != "" {
		if err := checkID(m.ID); err != nil {
			return err
		}
	}
	fields := []struct {
		name, v string
		max     int
	}{
		{"name", m.Name, MaxNameLen}, {"session_id", m.SessionID, MaxFieldLen}, {"backend", m.Backend, MaxFieldLen},
		{"runsc_version", m.RunscVersion, MaxFieldLen}, {"platform", m.Platform, MaxFieldLen},
	}
	for _, f := range fields {
		if err := checkText(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	if m.UID < 0 || m.UID > 1<<32-1 {
		return fmt.Errorf("%w: uid %d", ErrInvalid, m.UID)
	}
	if len(m.Profiles) > MaxProfiles {
		return fmt.Errorf("%w: %d profiles, at most %d", ErrInvalid, len(m.Profiles), MaxProfiles)
	}
	for _, p := range m.Profiles {
		if err := checkText("profile", p, MaxFieldLen); err != nil {
			return err
		}
	}
	if len(m.Spec) > MaxSpecLen {
		return fmt.Errorf("%w: spec is %d bytes, at most %d", ErrInvalid, len(m.Spec), MaxSpecLen)
	}
	if len(m.Spec) > 0 && !json.Valid(m.Spec) {
		return fmt.Errorf("%w: spec is not valid JSON", ErrInvalid)
	}
	m.NotSaved = capNotSaved(m.NotSaved)
	return nil
}

// capNotSaved keeps at most MaxNotSaved names of at most MaxNameLen bytes
// each (valid UTF-8), then says how many were left out.
func capNotSaved(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	keep := min(len(names), MaxNotSaved)
	out := make([]string, 0, keep+1)
	for _, n := range names[:keep] {
		out = append(out, capString(n, MaxNameLen))
	}
	if more := len(names) - keep; more > 0 {
		out = append(out, "... and "+strconv.Itoa(more)+" more")
	}
	return out
}

// capString cuts s to at most n bytes of valid UTF-8.
func capString(s string, n int) string {
	s = string([]rune(s[:min(len(s), n+4)])) // invalid bytes become U+FFFD
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// quoteCap quotes a possibly hostile value for an error message.
func quoteCap(s string) string { return strconv.Quote(capString(s, 64)) }

func sortManifests(ms []Manifest) {
	sort.SliceStable(ms, func(i, j int) bool {
		if !ms[i].Created.Equal(ms[j].Created) {
			return ms[i].Created.Before(ms[j].Created)
		}
		return ms[i].ID < ms[j].ID
	})
}
