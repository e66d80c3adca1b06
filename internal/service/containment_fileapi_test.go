package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// The file API reads the system tree with the server's rights, but gives
// of it only what the sandbox's user may read there, as one of the
// others: a file of the host's /usr that others may not read, and what
// lies in a directory others may not search, never come back (read,
// stat or listed); a file anyone may read still does. Judged by planting
// them in the host's /usr. (On an environment's root the system tree is
// the environment's: the host's files are not in it at all.)
func TestContainment_55_FileAPIReadsTheSystemTreeAsOthers(t *testing.T) {
	tok := randomToken(t)
	secret, open := "/usr/share/codecage-secret-"+tok, "/usr/share/codecage-open-"+tok
	dir := "/usr/share/codecage-private-" + tok
	t.Cleanup(func() {
		os.Remove(secret)
		os.Remove(open)
		os.RemoveAll(dir)
	})
	canary := "canary-" + tok
	for p, mode := range map[string]os.FileMode{secret: 0o600, open: 0o644} {
		if err := os.WriteFile(p, []byte(canary), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "inside"), []byte(canary), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := newService(t)
	ctx := context.Background()
	s, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	onHostRoot := os.Getenv(testEnvironmentVar) == ""
	refused := func(what string, err error) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: no error", what)
		case onHostRoot && !errors.Is(err, service.ErrPermission):
			t.Errorf("%s: %v, want a permission error", what, err)
		case !onHostRoot && !errors.Is(err, service.ErrPermission) && !errors.Is(err, service.ErrFileNotFound):
			t.Errorf("%s: %v", what, err)
		}
	}
	for _, p := range []string{secret, dir + "/inside"} {
		b, err := svc.ReadFile(ctx, s.ID, "o", p)
		if strings.Contains(string(b), canary) {
			t.Fatalf("the file API read %s: %q", p, b)
		}
		refused("read "+p, err)
		_, err = svc.StatFile(ctx, s.ID, "o", p)
		refused("stat "+p, err)
	}
	_, err = svc.ListFiles(ctx, s.ID, "o", dir)
	refused("list "+dir, err)
	if !onHostRoot {
		return
	}
	if l, err := svc.ListFiles(ctx, s.ID, "o", "/usr/share"); err != nil {
		t.Fatal(err)
	} else {
		for _, f := range l.Files {
			if strings.HasPrefix(f.Path, dir+"/") {
				t.Errorf("listing /usr/share showed %s", f.Path)
			}
		}
	}
	if b, err := svc.ReadFile(ctx, s.ID, "o", open); err != nil || string(b) != canary {
		t.Fatalf("read %s, which anyone may read: %q %v", open, b, err)
	}
}
