package envs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/report"
)

// An environment is recorded only once its Python has run, in a sandbox
// started from its own root (every binary there is the image author's),
// and said it is 3.9 or newer; its pre-imports must import there too.

// envLayerInside is where a sandbox sees an environment's packages layer.
const envLayerInside = "/opt/codecage/env"

// pythonCandidates are where a root's Python is looked for, in order.
var pythonCandidates = []string{"/usr/local/bin/python3", "/usr/bin/python3", "/opt/conda/bin/python3", "/usr/local/bin/python", "/usr/bin/python"}

const (
	// versionProbe says the version, once the standard modules the
	// harness loads import (python3-minimal, for one, lacks json).
	versionProbe = `import sys, importlib
missing = []
for m in ("json", "ast", "pickle", "signal", "socket", "struct", "ctypes", "fcntl", "inspect", "io", "linecache", "marshal", "resource", "select", "tempfile", "threading", "traceback", "warnings"):
    try:
        importlib.import_module(m)
    except BaseException as e:
        missing.append(m)
if missing:
    print("the harness needs the standard modules " + ", ".join(missing) + ", which do not import (a minimal Python?)")
    sys.exit(0)
print(list(sys.version_info[:3]))`
	probeTimeout  = 60 * time.Second
	maxProbeError = 300
)

// checkEnvironment finds the environment's Python and checks it (meta's
// Python, PythonVersion), then its pre-imports.
func (d *Envs) checkEnvironment(ctx context.Context, eb *envBuild) error {
	root, layer := eb.meta.RootDir, ""
	if eb.meta.Source.Kind != "requirements" {
		root = eb.st.Root()
	} else {
		layer = eb.st.Layer()
	}
	if err := d.findPython(ctx, eb, root); err != nil {
		return err
	}
	if eb.meta.Source.Kind != "requirements" {
		if err := d.recordRootModules(ctx, eb, root); err != nil {
			return err
		}
	}
	if len(eb.meta.Preimport) == 0 {
		return nil
	}
	return d.checkPreimports(ctx, eb, root, layer)
}

// findPython sets meta's Python and PythonVersion: the record's Python,
// the host's for a build on the host's root, else the first candidate in
// root that runs and is 3.9 or newer.
func (d *Envs) findPython(ctx context.Context, eb *envBuild, root string) error {
	candidates := []string{eb.meta.Python}
	switch {
	case eb.meta.Python != "":
	case root == "":
		candidates = []string{d.cfg.Interpreter}
		if d.cfg.Interpreter == "" {
			candidates = []string{fleet.DefaultInterpreter}
		}
	default:
		candidates = pythonsIn(root)
	}
	var tried []string
	for _, py := range candidates {
		out, err := d.probePython(ctx, root, "", py, "-I", "-S", "-c", versionProbe)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			tried = append(tried, py+": "+err.Error())
			continue
		}
		var v []int
		if json.Unmarshal([]byte(strings.TrimSpace(out)), &v) != nil || len(v) != 3 {
			tried = append(tried, py+": "+bounded.String(strings.TrimSpace(out), 300))
			continue
		}
		if v[0] < 3 || (v[0] == 3 && v[1] < 9) {
			tried = append(tried, fmt.Sprintf("%s is Python %d.%d.%d", py, v[0], v[1], v[2]))
			continue
		}
		eb.meta.Python, eb.meta.PythonVersion = py, fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
		eb.log.printf("Python %s at %s", eb.meta.PythonVersion, py)
		return nil
	}
	if len(tried) == 0 {
		tried = []string{"none of " + strings.Join(pythonCandidates, ", ") + " is there"}
	}
	return fmt.Errorf("%w: environment %s: no usable Python >= 3.9 in its root: %s", errdefs.ErrBuildFailed, eb.b.Name, strings.Join(tried, "; "))
}

// recordRootModules sets meta's Modules to those the built root adds.
func (d *Envs) recordRootModules(ctx context.Context, eb *envBuild, root string) error {
	mods, more, err := d.rootModules(ctx, root, eb.meta.Python)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: environment %s: listing the modules its root adds: %v", errdefs.ErrBuildFailed, eb.b.Name, err)
	}
	eb.meta.Modules = mods
	eb.log.printf("modules its root adds (runs in it may import them): %s", bounded.String(strings.Join(mods, " "), 2000))
	if more > 0 {
		eb.log.printf("%d more modules left out (at most %d are recorded); runs in it may not import those", more, maxEnvModules)
	}
	return nil
}

// checkPreimports imports each pre-import in a sandbox of the build.
func (d *Envs) checkPreimports(ctx context.Context, eb *envBuild, root, layer string) error {
	// The layer comes first on the path, as in the environment's sandboxes.
	code := "import sys, importlib\n"
	if layer != "" {
		code += fmt.Sprintf("sys.path.insert(0, %q)\n", envLayerInside)
	}
	code += "bad = []\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m)\n    except BaseException as e:\n        bad.append('%s (%s: %s)' % (m, type(e).__name__, str(e)[:200]))\nprint('; '.join(bad))\n"
	args := append([]string{"-I", "-c", code}, eb.meta.Preimport...)
	out, err := d.probePython(ctx, root, layer, eb.meta.Python, args...)
	if err != nil {
		return fmt.Errorf("%w: environment %s: checking its pre-imports: %v", errdefs.ErrBuildFailed, eb.b.Name, err)
	}
	if out = strings.TrimSpace(out); out != "" {
		return fmt.Errorf("%w: environment %s: a pre-import fails: %s", errdefs.ErrBuildFailed, eb.b.Name, bounded.String(out, 1000))
	}
	eb.log.printf("pre-imports import: %s", strings.Join(eb.meta.Preimport, ", "))
	return nil
}

// pythonsIn lists the candidates that exist in root (the sandbox then
// says whether they run: a link may point anywhere in there).
func pythonsIn(root string) []string {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil
	}
	defer r.Close()
	var out []string
	for _, p := range pythonCandidates {
		if _, err := r.Lstat(strings.TrimPrefix(p, "/")); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// probePython runs python with args in a sandbox started from root ("":
// the host's system directories), the layer bound where the environment's
// sandboxes see it, and returns its stdout; a failure says how it ended.
func (d *Envs) probePython(ctx context.Context, root, layer, python string, args ...string) (string, error) {
	stdout, stderr := &report.Output{}, &report.Output{}
	lim := d.o.Caps.Command(probeTimeout)
	lim.OutputBytes = 64 << 10
	work := fleet.Work{Kind: fleet.Command, ID: fleet.NewID(), Argv: append([]string{python}, args...),
		Env:    []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/tmp", "TMPDIR=/tmp"},
		Limits: lim, Stdout: stdout, Stderr: stderr}
	spec := work.Spec()
	spec.Root = root
	if layer != "" {
		spec.Binds = append(spec.Binds, fleet.Bind{Host: layer, Path: envLayerInside})
	}
	lease, err := d.fleet.Start(ctx, fleet.Native, spec)
	if err != nil {
		return "", d.o.StartError(ctx, err)
	}
	exit := lease.WaitProgram()
	if exit.ExitCode != 0 || exit.Limit != fleet.LimitNone {
		why := fmt.Sprintf("exit %d", exit.ExitCode)
		if exit.Limit != fleet.LimitNone {
			why = "limit " + string(exit.Limit)
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			why += ": " + bounded.Quote(bounded.String(lastLines(msg, 3), maxProbeError))
		}
		return stdout.String(), fmt.Errorf("%s", why)
	}
	return stdout.String(), nil
}

// lastLines is the end of s: its last n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
