package fleet

import (
	"fmt"
	"sync"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/wsfs"
)

// An owner's host uid (a session's: its interpreters, commands and pip
// share its files) is held by everything that may still run as it: the
// owner itself, each memory image of its sandbox (whose processes hold
// the uid inside), and each sandbox restored from one. The uid goes back
// to the host only when the last holder lets go, so it is never handed to
// an unrelated sandbox meanwhile. Forks of one image share its uid: they
// are copies of one owner's session, whose files that uid already owns.
var uidHolds = struct {
	sync.Mutex
	n map[int]int // uid -> holders
	// blocks are the owners with root inside: their uid is the user's of
	// a whole block of ids, from the first on (ReserveMachineIDs).
	blocks map[int]int // uid -> the block's first id
}{n: map[int]int{}, blocks: map[int]int{}}

// ReserveMachineIDs reserves a block of jail.MachineIDs host ids for a
// machine with root inside and returns the uid its user runs as
// (jail.SandboxUID inside); it is held once, and ReleaseUID lets go of the
// whole block. ok is false when a block is too many ids for this host's
// span (a container's small id map): the caller reserves one uid instead.
func ReserveMachineIDs() (uid int, ok bool, err error) {
	if !jail.BlocksFit(jail.MachineIDs) {
		return 0, false, nil
	}
	first, err := jail.ReserveUIDs(jail.MachineIDs)
	if err != nil {
		return 0, true, err
	}
	uid = first + jail.SandboxUID
	uidHolds.Lock()
	uidHolds.n[uid]++
	uidHolds.blocks[uid] = first
	uidHolds.Unlock()
	return uid, true, nil
}

// HoldMachineIDs is HoldUID for the user's uid of a machine image with
// root inside: the whole block is held with it (claimed host-wide when
// this process does not hold it yet), so that the restored sandbox maps
// the image's ids and has root inside again. Undone by one ReleaseUID.
func HoldMachineIDs(uid int) error {
	first := uid - jail.SandboxUID
	uidHolds.Lock()
	defer uidHolds.Unlock()
	if uidHolds.n[uid] > 0 {
		if uidHolds.blocks[uid] != first {
			return fmt.Errorf("fleet: the image's uid %d is held here without its block of ids", uid)
		}
		uidHolds.n[uid]++
		return nil
	}
	if err := jail.ClaimUIDs(first, jail.MachineIDs); err != nil {
		return fmt.Errorf("fleet: the image's block of ids: %w", err)
	}
	uidHolds.n[uid]++
	uidHolds.blocks[uid] = first
	return nil
}

// BlockOwners is where the ids of a machine's block lie from its user's
// (jail.SandboxUID inside): what a copy of its files may keep
// (wsfs.ArchiveLimits.Owners).
var BlockOwners = wsfs.OwnerWindow{Min: -jail.SandboxUID, Max: jail.MachineIDs - jail.SandboxUID}

// RootInside reports whether uid is the user of a block from
// ReserveMachineIDs: its sandboxes may map root inside.
func RootInside(uid int) bool {
	uidHolds.Lock()
	defer uidHolds.Unlock()
	_, ok := uidHolds.blocks[uid]
	return ok
}

// ReserveUID reserves one host uid for the sandboxes of one owner; it is
// held once, and ReleaseUID lets go of it.
func ReserveUID() (int, error) {
	uid, err := jail.ReserveUID()
	if err != nil {
		return 0, err
	}
	uidHolds.Lock()
	uidHolds.n[uid]++
	uidHolds.Unlock()
	return uid, nil
}

// HoldUID adds a holder to uid: an image of a sandbox that ran as it, kept
// by the caller (a snapshot), or a sandbox restored from one. A uid this
// process does not hold yet (an image an earlier process made) is claimed
// host-wide first, and refused when another process or sandbox holds it.
// Each HoldUID is undone by one ReleaseUID.
func HoldUID(uid int) error {
	uidHolds.Lock()
	defer uidHolds.Unlock()
	if uidHolds.n[uid] == 0 {
		if err := jail.ClaimUID(uid); err != nil {
			return fmt.Errorf("fleet: the image's uid: %w", err)
		}
	}
	uidHolds.n[uid]++
	return nil
}

// ReleaseUID lets go of one hold of uid (from ReserveUID or HoldUID); the
// last one returns it to the host.
func ReleaseUID(uid int) {
	uidHolds.Lock()
	defer uidHolds.Unlock()
	switch uidHolds.n[uid] {
	case 0:
		return
	case 1:
		delete(uidHolds.n, uid)
		if first, ok := uidHolds.blocks[uid]; ok {
			delete(uidHolds.blocks, uid)
			jail.ReleaseUIDs(first, jail.MachineIDs)
			return
		}
		jail.ReleaseUID(uid)
	default:
		uidHolds.n[uid]--
	}
}

// uidHeld reports whether uid is an owner's (held through this file).
func uidHeld(uid int) bool {
	uidHolds.Lock()
	defer uidHolds.Unlock()
	return uidHolds.n[uid] > 0
}

// UIDHeld reports whether something of this process holds uid: a restore
// of an image made by another process must not share it with them.
func UIDHeld(uid int) bool { return uidHeld(uid) }
