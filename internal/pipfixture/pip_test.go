package pipfixture

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// hostPython is Debian's interpreter; the python3 on PATH may be a slow
// pyenv shim with another pip.
const hostPython = "/usr/bin/python3"

var (
	pipOnce sync.Once
	pipErr  error
	pipOut  []byte
)

// requirePip fails the test when the host's pip is missing: these tests
// exist to show that the real pip accepts the fixtures.
func requirePip(t *testing.T) {
	t.Helper()
	pipOnce.Do(func() {
		pipOut, pipErr = exec.Command(hostPython, "-m", "pip", "--version").CombinedOutput()
	})
	if pipErr != nil {
		t.Fatalf("%s -m pip --version: %v\n%s\ninstall it: apt-get install -y python3-pip", hostPython, pipErr, pipOut)
	}
}

// pipEnv keeps the user's pip configuration, cache and proxies out of the
// tests.
func pipEnv(t *testing.T) []string {
	return []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + t.TempDir(),
		"PIP_CONFIG_FILE=" + os.DevNull,
		"PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_INPUT=1",
		"PIP_NO_CACHE_DIR=1",
		"NO_PROXY=*",
		"PYTHONDONTWRITEBYTECODE=1",
	}
}

// pip runs "python3 -m pip install args..." and returns its output and
// error.
func pip(t *testing.T, args ...string) (string, error) {
	t.Helper()
	requirePip(t)
	cmd := exec.Command(hostPython, append([]string{"-m", "pip", "install", "--no-cache-dir", "--no-color"}, args...)...)
	cmd.Env = pipEnv(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustPip is pip that fails the test when pip fails.
func mustPip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := pip(t, args...)
	if err != nil {
		t.Fatalf("pip install %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// importFrom runs code in the host interpreter with target first on
// sys.path and returns what it printed.
func importFrom(t *testing.T, target, code string) string {
	t.Helper()
	cmd := exec.Command(hostPython, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1])\n"+code, target)
	cmd.Env = pipEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -c %q: %v\n%s", code, err, out)
	}
	return strings.TrimSpace(string(out))
}
