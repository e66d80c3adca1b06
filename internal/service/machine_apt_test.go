package service_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/debfixture"
)

// apt-get, as root inside a machine with the network profile: a source
// added under /etc/apt, `apt-get update` and `apt-get install` through
// the session's egress proxy, from a repository the operator allows;
// the package runs, the source is kept across a restart of the
// interpreter, and the host's package database never changes.
func TestMachineAptGetFromAnAllowedRepository(t *testing.T) { aptFromAllowedRepository(t, false) }

// The same in a gVisor machine: root inside there writes its own root's
// /etc and /usr, kept across the restart as natively.
func TestGVisorMachineAptGetFromAnAllowedRepository(t *testing.T) { aptFromAllowedRepository(t, true) }

func aptFromAllowedRepository(t *testing.T, onGVisor bool) {
	dir := t.TempDir()
	// Its dependency is the system's, known to apt from the machine's
	// database (the host's at first), not fetched.
	if _, err := debfixture.Package(dir, "cage-apt-hello", "bash"); err != nil {
		t.Fatal(err)
	}
	repo, err := debfixture.ServeRepo(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	svc, se := networkMachineOn(t, repo.URL, onGVisor)
	ctx := context.Background()
	hostStatus, _ := os.ReadFile("/var/lib/dpkg/status")
	out := machineCommand(t, svc, se.ID, "echo 'deb [trusted=yes] "+repo.URL+" ./' | sudo tee /etc/apt/sources.list.d/cage.list >/dev/null && sudo apt-get update -q 2>&1", 2*time.Minute)
	if strings.Contains(out, "unsandboxed") || strings.Contains(out, "_apt") {
		t.Errorf("apt fetched as root, not as _apt:\n%s", out)
	}
	machineCommand(t, svc, se.ID, "sudo apt-get install -y -q cage-apt-hello", 2*time.Minute)
	if got := machineCommand(t, svc, se.ID, "cage-apt-hello && dpkg-query -W -f '${Status}' cage-apt-hello", 0); got != "hello from cage-apt-hello\ninstall ok installed" {
		t.Fatalf("the installed package: %q", got)
	}
	if repo.Requests("/Packages") == 0 || repo.Requests("/cage-apt-hello.deb") == 0 {
		t.Fatal("the repository was not asked")
	}
	if _, err := os.Lstat("/usr/bin/cage-apt-hello"); !os.IsNotExist(err) {
		t.Fatalf("the host has /usr/bin/cage-apt-hello: %v", err)
	}
	if now, _ := os.ReadFile("/var/lib/dpkg/status"); string(now) != string(hostStatus) {
		t.Fatal("the host's package database changed")
	}
	// A restart of the machine's interpreter starts its sandbox anew.
	if _, err := svc.RestartSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	if got := machineCommand(t, svc, se.ID, "cat /etc/apt/sources.list.d/cage.list && cage-apt-hello", 0); got != "deb [trusted=yes] "+repo.URL+" ./\nhello from cage-apt-hello\n" {
		t.Fatalf("after a restart: %q", got)
	}
}
