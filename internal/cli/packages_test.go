package cli

import (
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/pipfixture"
)

// TestPackagesLayer: the operator installs a package once; every sandbox
// can import it, read-only.
func TestPackagesLayer(t *testing.T) {
	wh := t.TempDir()
	if _, err := pipfixture.Wheel(wh, "layerlib", "3.1", pipfixture.WheelOptions{}); err != nil {
		t.Fatal(err)
	}
	layer := t.TempDir()
	state := t.TempDir()
	flags := []string{"--pip-find-links", wh, "--packages-dir", layer, "--state-dir", state}
	code, out, errOut := cli(t, "", append([]string{"packages", "install", "layerlib"}, flags...)...)
	if code != 0 || !strings.Contains(out, "installed layerlib 3.1") {
		t.Fatalf("install: %d %s %s", code, out, errOut)
	}
	code, out, _ = cli(t, "", append([]string{"packages", "list"}, flags...)...)
	if code != 0 || !strings.Contains(out, "layerlib") || !strings.Contains(out, "3.1") {
		t.Fatalf("list: %d %s", code, out)
	}
	code, out, errOut = cli(t, "", append([]string{"run", "-c", "import layerlib\nprint(layerlib.VALUE)\nopen(layerlib.__file__, 'a')"}, flags...)...)
	if !strings.Contains(out, "layerlib 3.1") || !strings.Contains(out+errOut, "Read-only file system") && !strings.Contains(out+errOut, "Permission denied") {
		t.Fatalf("run: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli(t, "", append([]string{"packages", "install", "--index-url=http://x"}, flags...)...); code != exitUsage {
		t.Fatalf("bad name: %d %s", code, errOut)
	}
	if code, out, _ := cli(t, "", append([]string{"packages", "install", "subprocess"}, flags...)...); code != exitFailure || !strings.Contains(out, "blocked") {
		t.Fatalf("blocked: %d %s", code, out)
	}
}
