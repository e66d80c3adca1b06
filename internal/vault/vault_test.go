package vault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/pgtest"
)

const canary = "sk-vault-canary-51c0"

var key = []byte("0123456789abcdef0123456789abcdef")

func exercise(t *testing.T, v *Vault, other func() *Vault) {
	ctx := context.Background()
	if err := v.Put(ctx, "alice", "openai", canary); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(ctx, "alice", "github", "ghp_1"); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Value(ctx, "alice", "openai"); err != nil || got != canary {
		t.Fatalf("Value = %q, %v", got, err)
	}
	if _, err := v.Value(ctx, "bob", "openai"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's secret: %v, want ErrNotFound", err)
	}
	list, err := v.List(ctx, "alice")
	if err != nil || len(list) != 2 || list[0].Name != "github" || list[1].Name != "openai" || list[0].Created.IsZero() {
		t.Errorf("List = %+v, %v", list, err)
	}
	if err := v.Put(ctx, "alice", "openai", canary+"-2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Value(ctx, "alice", "openai"); got != canary+"-2" {
		t.Errorf("a put replaces: %q", got)
	}
	if w := other(); w != nil {
		if _, err := w.Value(ctx, "alice", "openai"); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), canary) {
			t.Errorf("another key opens it: %v", err)
		}
	}
	for _, bad := range []string{"", "../x", ".hidden", "a/b", strings.Repeat("n", 65), "é"} {
		if err := v.Put(ctx, "alice", bad, "v"); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if err := v.Put(ctx, "alice", "big", strings.Repeat("v", MaxValueBytes+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a value over the cap: %v", err)
	}
	for i := range MaxPerOwner {
		if err := v.Put(ctx, "carol", fmt.Sprint("s", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Put(ctx, "carol", "one-more", "v"); !errors.Is(err, ErrLimit) {
		t.Errorf("over MaxPerOwner: %v", err)
	}
	if err := v.Put(ctx, "carol", "s0", "again"); err != nil {
		t.Errorf("replacing at the cap: %v", err)
	}
	if err := v.Delete(ctx, "alice", "openai"); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, "alice", "openai"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a second delete: %v", err)
	}
}

func TestDirVault(t *testing.T) {
	dir := t.TempDir()
	v, err := Open(context.Background(), Options{Dir: dir, Secret: key})
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, v, func() *Vault {
		w, _ := Open(context.Background(), Options{Dir: dir, Secret: bytes.Repeat([]byte("k"), 32)})
		return w
	})
	// On disk: sealed, the value nowhere; a file moved to another owner
	// does not open there.
	ctx := context.Background()
	if err := v.Put(ctx, "alice", "moved", canary); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(canary)) {
				t.Errorf("%s holds the value in the clear", p)
			}
			if st, _ := os.Stat(p); st.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s is mode %v", p, st.Mode())
			}
		}
		return nil
	})
	b, _ := os.ReadFile(filepath.Join(v.b.(*dirBackend).ownerDir("alice"), "moved"))
	bd := v.b.(*dirBackend).ownerDir("bob")
	os.MkdirAll(bd, 0o700)
	os.WriteFile(filepath.Join(bd, "moved"), bytes.ReplaceAll(b, []byte(`"owner":"alice"`), []byte(`"owner":"bob"`)), 0o600)
	if _, err := v.Value(ctx, "bob", "moved"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a sealed value under another owner: %v", err)
	}
}

func TestPostgresVault(t *testing.T) {
	pg := pgtest.Start(t)
	v, err := Open(context.Background(), Options{DSN: pg.DSN(), Secret: key})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	exercise(t, v, func() *Vault {
		w, _ := Open(context.Background(), Options{DSN: pg.DSN(), Secret: bytes.Repeat([]byte("k"), 32)})
		return w
	})
	// A second replica with the same secret reads what the first wrote.
	w, err := Open(context.Background(), Options{DSN: pg.DSN(), Secret: key})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got, err := w.Value(context.Background(), "alice", "github"); err != nil || got != "ghp_1" {
		t.Errorf("another replica: %q, %v", got, err)
	}
	// A database that went away: a clear error, not a hang.
	pg.Stop()
	if _, err := v.Value(context.Background(), "alice", "github"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("with the database down: %v", err)
	}
}
