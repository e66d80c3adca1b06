package gvisor

import (
	"errors"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// A memory image is a directory: runsc's own files (the kernel's state and
// the memory pages, as `runsc checkpoint` wrote them) and ManifestName,
// which the backend writes after them and checks before any restore.

// ManifestName is the file of an image directory that describes it.
const ManifestName = "codecage-image.json"

// ImageFormat is the version of the manifest's layout.
const ImageFormat = 1

// Manifest describes a memory image: what a restore must match (the runsc
// build and platform, the mounts), and what it needs (the uid, the
// program's environment, its limits).
type Manifest struct {
	Format int `json:"format"`
	// RunscVersion is what `runsc --version` printed first, Platform the
	// platform the sandbox ran on: an image restores only under the same.
	RunscVersion string `json:"runsc_version"`
	Platform     string `json:"platform"`
	// UID is the host uid the sandbox ran as: its processes in the image
	// hold it, and every sandbox restored from it runs as it too.
	UID int `json:"uid"`
	// RootInside: the sandbox mapped UID's block of ids (root inside, see
	// identity), and its restores must map the same, holding the block.
	RootInside bool `json:"root_inside,omitempty"`
	// OwnRoot: the sandbox ran on the machine's own root on the host
	// (ownroot_linux.go), which the session keeps beside the image; else
	// its root's writes are in the image. A restore must do the same.
	OwnRoot bool `json:"own_root,omitempty"`
	// SourceID is the sandbox the image was made from.
	SourceID string    `json:"source_id"`
	Created  time.Time `json:"created"`
	// Bytes is the size of runsc's files in the directory.
	Bytes int64 `json:"bytes"`
	// Spec is what the image's sandbox was started with, as far as a
	// restore needs it.
	Spec ImageSpec `json:"spec"`
}

// ImageSpec is the part of a sandbox's jail.Spec that its image keeps.
type ImageSpec struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Home string   `json:"home,omitempty"`
	// Root is the host directory of the environment's root the sandbox
	// ran on ("": the host's system directories). The image's kernel holds
	// open files of it and has loaded its programs and libraries: a
	// restore must name the same root, and it must still be there.
	Root string `json:"root,omitempty"`
	// Limits are the sandbox's; a restore takes its lifetime, CPU and
	// output budgets from its own spec, the rest (memory, file systems'
	// sizes) from here.
	Limits jail.Limits `json:"limits"`
	// Mounts are the sandbox's mounts in order: a restore's bundle must
	// have the same (its host directories may differ).
	Mounts []ImageMount `json:"mounts"`
}

// ImageMount is one mount of an image's sandbox: where, and of what kind.
type ImageMount struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

// ErrImageMismatch means an image cannot be restored here: another runsc
// build or platform made it, or the restore's mounts differ from its.
var ErrImageMismatch = errors.New("gvisor: the image does not match")

// ErrBadImage means a directory holds no usable image: missing, partial,
// corrupt, or of an unknown format.
var ErrBadImage = errors.New("gvisor: no usable image")
