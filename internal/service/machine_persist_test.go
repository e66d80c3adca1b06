package service_test

import (
	"context"
	"os"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// A machine's own root is kept as its workspace is: by a park, which
// brings it back under its id, and by a snapshot, whose copies start
// with it (and are machines too).
func TestMachineRootIsKeptByParksAndSnapshots(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		return // TestMachineSessionIsOneProcessTree checks the refusal
	}
	svc, _ := snapshotService(t)
	ctx := context.Background()
	se, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", Machine: true})
	if err != nil {
		t.Fatal(err)
	}
	machineCommand(t, svc, se.ID, "mkdir -p /srv/data && echo kept > /srv/data/f", 0)
	// What root removes from the system stays removed (the overlays'
	// whiteouts), and a directory it made anew hides the system's
	// (an opaque one).
	machineCommand(t, svc, se.ID, "sudo rm /usr/bin/yes /etc/hostname && sudo rm -r /usr/share/doc/bash && sudo mkdir /usr/share/doc/bash && sudo touch /usr/share/doc/bash/mine", 0)
	const removed = "test -e /usr/bin/yes || test -e /etc/hostname || echo removed; ls /usr/share/doc/bash"
	if _, err := svc.PauseSession(ctx, se.ID, "o", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, se.ID, "o"); err != nil {
		t.Fatal(err)
	}
	if got := machineCommand(t, svc, se.ID, "cat /srv/data/f; "+removed, 0); got != "kept\nremoved\nmine\n" {
		t.Fatalf("after a park: %q", got)
	}
	snap, err := svc.SnapshotSession(ctx, se.ID, "o", "")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !cp.Machine {
		t.Fatal("a machine's copy is no machine")
	}
	if got := machineCommand(t, svc, cp.ID, "cat /srv/data/f; "+removed+"; sleep 30 & echo started", 0); got != "kept\nremoved\nmine\nstarted\n" {
		t.Fatalf("in the copy: %q", got)
	}
	if _, err := os.Stat("/usr/bin/yes"); err != nil {
		t.Fatalf("the host's /usr/bin/yes: %v", err)
	}
}
