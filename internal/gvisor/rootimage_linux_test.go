package gvisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// markedRoot is a minimal Python root at dir/name whose
// /usr/share/codecage-build says mark.
func markedRoot(t *testing.T, dir, name, mark string) string {
	t.Helper()
	root := filepath.Join(dir, name)
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr", "share"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr", "share", "codecage-build"), []byte(mark), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// A memory image remembers the root its sandbox ran on: a restore on that
// root goes on where it was (the root's file, the variables); one on
// another root, on the host's root, or after the root is gone is refused
// with ErrImageMismatch naming the roots, and leaves no bundle.
func TestCheckpointKeepsItsRoot(t *testing.T) {
	uid := reserveUID(t)
	state := t.TempDir()
	rt := gvisor.Runtime{StateDir: state}
	roots := t.TempDir()
	if err := os.Chmod(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	rootA := markedRoot(t, roots, "a", "A")
	rootB := markedRoot(t, roots, "b", "B")
	ws := sandboxWorkspace(t, uid)
	spec := harnessSpec(ws, uid)
	spec.Root = rootA
	sb, err := gvisor.Start(context.Background(), rt, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Kill(jail.LimitNone); sb.Wait(); sb.Channel().Close() })
	if err := runtime.ReadReady(sb.Channel()); err != nil {
		t.Fatalf("the harness is not ready: %v %s", err, sb.Log())
	}
	if got := ask(t, sb, "x = 41; open('/usr/share/codecage-build').read()"); got != `"A"` {
		t.Fatalf("the sandbox on root A read %s", got)
	}
	img := filepath.Join(t.TempDir(), "img")
	m, err := sb.Checkpoint(context.Background(), img, true)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if m.Spec.Root != rootA {
		t.Fatalf("the manifest's root is %q, want %q", m.Spec.Root, rootA)
	}
	if read, err := gvisor.ReadImage(img); err != nil || read.Spec.Root != rootA {
		t.Fatalf("the manifest read back: %+v %v", read.Spec.Root, err)
	}
	restoreOn := func(root string) (*gvisor.Sandbox, error) {
		s := harnessSpec(copyWorkspace(t, ws, uid), 0)
		s.Argv, s.Env, s.Root = nil, nil, root
		return gvisor.Restore(context.Background(), rt, img, s)
	}
	for _, c := range []struct {
		name, root, says string
	}{
		{"another root", rootB, rootA},
		{"the host's root", "", "the host's root"},
	} {
		before := len(bundles(t, state))
		r, err := restoreOn(c.root)
		if err == nil {
			r.Kill(jail.LimitNone)
			r.Wait()
			t.Fatalf("%s: restored", c.name)
		}
		if !errors.Is(err, gvisor.ErrImageMismatch) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrImageMismatch naming %q", c.name, err, c.says)
		}
		if n := len(bundles(t, state)); n != before {
			t.Errorf("%s: %d bundles left, %d before", c.name, n, before)
		}
	}
	// Its own root: it goes on, and reads the root's file.
	r, err := restoreOn(rootA)
	if err != nil {
		t.Fatalf("restore on its root: %v", err)
	}
	t.Cleanup(func() { r.Kill(jail.LimitNone); r.Wait(); r.Channel().Close() })
	if got := ask(t, r, "[x + 1, open('/usr/share/codecage-build').read()]"); got != `[42,"A"]` {
		t.Fatalf("the restored sandbox: %s", got)
	}
	// The root removed (its environment collected): refused, saying so.
	sb.Kill(jail.LimitNone)
	sb.Wait()
	r.Kill(jail.LimitNone)
	r.Wait()
	if err := os.Rename(rootA, rootA+".gone"); err != nil {
		t.Fatal(err)
	}
	if r, err := restoreOn(rootA); err == nil {
		r.Kill(jail.LimitNone)
		r.Wait()
		t.Fatal("restored on a root that is gone")
	} else if !errors.Is(err, gvisor.ErrImageMismatch) || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("a root that is gone: %v", err)
	}
}
