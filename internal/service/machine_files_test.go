package service_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// The file API reads a machine's /usr and /etc as its code sees them,
// with what root installed, changed and removed there (the overlays), not
// the host's /usr or what codecage wrote under /etc; it still writes
// neither. Judged against the host's files too.
func TestMachineFilesSeeRootsChanges(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		return // the gVisor machine's: TestGVisorMachineFilesReachItsWholeRoot
	}
	secret := plantHostSecret(t)
	svc := newService(t)
	se, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o", Machine: true})
	if err != nil {
		t.Fatal(err)
	}
	filesSeeRootsChanges(t, svc, se, secret)
}

// plantHostSecret plants a host file others may not read in the host's
// /usr: the live view gives it no more than the host-side one did (row
// 55).
func plantHostSecret(t *testing.T) string {
	t.Helper()
	secret := "/usr/share/codecage-secret-" + randomToken(t)
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(secret) })
	return secret
}

// filesSeeRootsChanges has root of the machine se change its /etc and
// /usr, and checks what the file API reads there, and the host's files.
func filesSeeRootsChanges(t *testing.T, svc *service.Service, se *service.SessionInfo, secret string) {
	t.Helper()
	ctx := context.Background()
	machineCommand(t, svc, se.ID, "echo '10.0.0.9 cage-db' | sudo tee -a /etc/hosts >/dev/null && echo mine | sudo tee /usr/local/bin/cage-tool >/dev/null && sudo rm /usr/bin/yes", 0)
	if b, err := svc.ReadFile(ctx, se.ID, "o", "/etc/hosts"); err != nil || !strings.Contains(string(b), "cage-db") {
		t.Errorf("/etc/hosts through the file API: %q %v", b, err)
	}
	if b, err := svc.ReadFile(ctx, se.ID, "o", "/usr/local/bin/cage-tool"); err != nil || string(b) != "mine\n" {
		t.Errorf("root's /usr/local/bin/cage-tool through the file API: %q %v", b, err)
	}
	list, err := svc.ListFiles(ctx, se.ID, "o", "/usr/local/bin")
	found := false
	for _, f := range list.Files {
		found = found || strings.HasSuffix(f.Path, "/cage-tool")
	}
	if err != nil || !found {
		t.Errorf("listing /usr/local/bin: %+v %v", list, err)
	}
	if _, err := svc.StatFile(ctx, se.ID, "o", "/usr/bin/yes"); !errors.Is(err, service.ErrFileNotFound) {
		t.Errorf("/usr/bin/yes, which root removed: %v", err)
	}
	// Through /bin, the link to usr/bin, the system's programs still show.
	if fi, err := svc.StatFile(ctx, se.ID, "o", "/bin/sh"); err != nil || fi == nil {
		t.Errorf("/bin/sh: %v", err)
	}
	if b, err := svc.ReadFile(ctx, se.ID, "o", secret); err == nil || strings.Contains(string(b), "host secret") {
		t.Errorf("the host's private %s through the file API: %q %v", secret, b, err)
	}
	if _, err := svc.WriteFile(ctx, se.ID, "o", "/usr/local/bin/other", []byte("x")); !errors.Is(err, service.ErrPermission) {
		t.Errorf("a write to /usr/local/bin: %v", err)
	}
	if _, err := os.Stat("/usr/bin/yes"); err != nil {
		t.Errorf("the host's /usr/bin/yes: %v", err)
	}
	if _, err := os.Lstat("/usr/local/bin/cage-tool"); !os.IsNotExist(err) {
		t.Errorf("the host has /usr/local/bin/cage-tool: %v", err)
	}
	if b, _ := os.ReadFile("/etc/hosts"); strings.Contains(string(b), "cage-db") {
		t.Error("the host's /etc/hosts changed")
	}
}
