package jail

import "sync"

// HostUIDBase is the first host uid given to sandboxes when codecage runs as
// root; each running sandbox holds one uid in [HostUIDBase, +HostUIDCount).
// The range lies far above any account or subordinate-id range.
var (
	HostUIDBase  = 1_500_000_000
	HostUIDCount = 65536
)

var uids struct {
	sync.Mutex
	used map[int]bool
	next int
}

// allocateUID returns a host uid no other sandbox of this process holds.
func allocateUID() int {
	uids.Lock()
	defer uids.Unlock()
	if uids.used == nil {
		uids.used = map[int]bool{}
	}
	for i := 0; i < HostUIDCount; i++ {
		uid := HostUIDBase + (uids.next+i)%HostUIDCount
		if !uids.used[uid] {
			uids.used[uid] = true
			uids.next = (uids.next + i + 1) % HostUIDCount
			return uid
		}
	}
	// More sandboxes than uids: share one rather than fail; the pid, mount
	// and user namespaces still separate them.
	return HostUIDBase
}

func releaseUID(uid int) {
	uids.Lock()
	defer uids.Unlock()
	delete(uids.used, uid)
}

// ReserveUID holds a host uid for a caller that runs several sandboxes as
// one identity over time (a session's interpreter, its restarts and its
// commands share its workspace files). Release it with ReleaseUID.
func ReserveUID() int { return allocateUID() }

// ReleaseUID frees a uid from ReserveUID.
func ReleaseUID(uid int) { releaseUID(uid) }
