package scenarios_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envstore"
)

// scenEnv is the environment the scenarios may start from: the host's
// root (nothing to unpack, so cheap) with a layer holding the module
// scenmod, and the variable SCEN_GREETING, which its sandboxes' runs and
// commands see.
const scenEnv = "scenenv"

// scenmod is the layer's module. Its greeting reads the variable when
// called: the basic profile lets a run import scenmod (the environment's
// module) but not os, and the import policy judges the run's own imports
// only, not those of the modules it imports.
const scenmod = `import os as _os

VALUE = "from the layer"


def greeting():
    return _os.environ.get("SCEN_GREETING")
`

// commitEnvironment records scenEnv in the store at dir, as a build over
// the host's root would, before the service opens the store.
func commitEnvironment(t *testing.T, dir string) {
	t.Helper()
	store, err := envstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Stage()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Abort()
	mod := filepath.Join(st.Layer(), "scenmod", "__init__.py")
	if err := os.MkdirAll(filepath.Dir(mod), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mod, []byte(scenmod), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Commit(st, envstore.Env{Name: scenEnv, Source: envstore.Source{Kind: "requirements"},
		Python: "/usr/bin/python3", Modules: []string{"scenmod"},
		Vars: map[string]string{"SCEN_GREETING": "hello from the environment"}, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
}
