package fleet

import (
	"errors"
	"os"
)

// ErrNoRootView means the sandbox's own tree cannot be reached from the
// host (gVisor's lives in its kernel); the caller shows the host's side.
var ErrNoRootView = errors.New("fleet: the sandbox's own tree is not reachable from the host")

// rootOpener is a sandbox whose tree, as its processes see it, the host
// can open (the native jail's).
type rootOpener interface {
	OpenRootDir(dir string) (*os.File, error)
}

// OpenRootDir opens dir of the sandbox's tree as its processes see it,
// for reading (jail.Sandbox.OpenRootDir).
func (l *Lease) OpenRootDir(dir string) (*os.File, error) {
	if o, ok := l.current().(rootOpener); ok {
		return o.OpenRootDir(dir)
	}
	return nil, ErrNoRootView
}
