package gvisor

import (
	"os"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/jail"
)

// TestBundleStaysInItsRoot: a minimal root whose links would lead a mount
// point out of the bundle (an absolute directory link, then a file below
// it) is refused, and nothing is created outside.
func TestBundleStaysInItsRoot(t *testing.T) {
	outside := t.TempDir()
	spec := jail.Spec{Argv: []string{"/bin/true"},
		Programs:      &jail.Programs{Links: map[string]string{"/escape": outside}},
		ReadOnlyBinds: []string{"/escape/sub/lib.so"}, // bound at its own path, below the link
	}
	spec.Limits = spec.Limits.WithDefaults()
	dir := t.TempDir()
	_, err := writeBundle(dir, spec, 1500000000)
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("writeBundle: %v, want a refusal naming the symlink", err)
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Fatalf("created outside the bundle: %v", left)
	}
}
