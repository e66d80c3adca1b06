// Package envstore keeps environments: named, immutable, content-addressed
// read-only roots that sandboxes start from, built once by the operator.
// It stores and unpacks; it runs nothing (the service builds, the fleet
// runs the build's sandboxes and the checks).
package envstore

import (
	"errors"
	"regexp"
	"time"
)

// Errors of the store.
var (
	// ErrNotFound means no environment has that name.
	ErrNotFound = errors.New("envstore: no such environment")
	// ErrExists means the name is taken.
	ErrExists = errors.New("envstore: an environment of that name exists")
	// ErrBadName means a name outside NamePattern.
	ErrBadName = errors.New("envstore: an environment name is 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
	// ErrBadImage means an image, layer or root refused at build time
	// (corrupt, escaping, too big, without a usable Python); the message
	// says which and why.
	ErrBadImage = errors.New("envstore: bad image")
)

// NamePattern is what an environment name may be (an E2B template alias fits).
var NamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Source says what an environment was built from.
type Source struct {
	// Kind is "requirements", "debian", "image", "dockerfile" or "template".
	Kind string `json:"kind"`
	// Ref is the image tarball, layout or reference, or the base
	// environment's name; Packages the requirements or Debian packages.
	Ref      string   `json:"ref,omitempty"`
	Packages []string `json:"packages,omitempty"`
}

// Env is one environment, as recorded.
type Env struct {
	Name string `json:"name"`
	// ID is "sha256:<hex>" of its content (root and layer).
	ID     string `json:"id"`
	Source Source `json:"source"`
	// Base is the name of the environment whose root this one's layer
	// sits on ("" with RootDir "": the host's root).
	Base string `json:"base,omitempty"`
	// RootDir is the host directory of its root filesystem ("": the
	// host's system directories); LayerDir of its Python packages layer
	// ("": none), put on sys.path.
	RootDir  string `json:"root_dir,omitempty"`
	LayerDir string `json:"layer_dir,omitempty"`
	// Size is the bytes its own root and layer take.
	Size int64 `json:"size"`
	// Python is the interpreter's path inside, PythonVersion its version
	// ("3.11.2"), checked at build time.
	Python        string `json:"python"`
	PythonVersion string `json:"python_version"`
	// Modules are the top-level modules its root and layer add beyond
	// the standard library (the import policy lets runs in it import
	// them); Preimport, what its zygote imports.
	Modules   []string `json:"modules,omitempty"`
	Preimport []string `json:"preimport,omitempty"`
	// StartCmd runs in the background when a sandbox starts; ReadyCmd
	// must succeed before it is handed out. Workdir and Vars are the
	// sandbox's working directory and environment variables.
	StartCmd string            `json:"start_cmd,omitempty"`
	ReadyCmd string            `json:"ready_cmd,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	Vars     map[string]string `json:"vars,omitempty"`
	Created  time.Time         `json:"created"`
}
