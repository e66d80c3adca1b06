package jail

import (
	"os"
	"path/filepath"
)

// The upper and work directories of a machine's /etc overlay
// (etcoverlay_linux.go), relative to its own root: under its usr, which
// the /usr overlay covers.
const (
	etcUpper = "usr/.etc-upper"
	etcWork  = "usr/.etc-work"
)

// MachineEtcIsKept reports whether the machine whose own root is the host
// directory root keeps root's changes to its /etc (the overlay's upper
// layer is there). Its root's etc then holds what codecage wrote below
// that overlay: read by the file API, written by the sandbox alone.
func MachineEtcIsKept(root string) bool {
	fi, err := os.Lstat(filepath.Join(root, etcUpper))
	return err == nil && fi.IsDir()
}
