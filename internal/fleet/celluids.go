package fleet

import (
	"fmt"
	"sync"

	"github.com/codecage/codecage/internal/jail"
)

// cellUIDs are a zygote's host uids: its own, then one per cell at once,
// reserved host-wide for the zygote's life (its restarts included). A
// cell holds its uid from its fork until it has ended and is torn down,
// so no two live cells share one, nor a per-user kernel limit.
type cellUIDs struct {
	mu     sync.Mutex
	first  int // the zygote's host uid; 0 until reserved
	used   []bool
	held   int
	next   int // a freed uid is not handed out again at once
	closed bool
}

func newCellUIDs(cells int) *cellUIDs {
	return &cellUIDs{used: make([]bool, min(max(cells, 1), jail.MaxCellUIDs))}
}

// zygoteUID reserves the range at the first call and returns the
// zygote's host uid.
func (u *cellUIDs) zygoteUID() (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return 0, fmt.Errorf("fleet: zygote closed")
	}
	if u.first == 0 {
		first, err := jail.ReserveUIDs(1 + len(u.used))
		if err != nil {
			return 0, err
		}
		u.first = first
	}
	return u.first, nil
}

// take hands out a cell's index: its uid is jail.CellUID(i) in the
// zygote's user namespace, u.host(i) on the host.
func (u *cellUIDs) take() (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(u.used)
	for k := range n {
		if i := (u.next + k) % n; !u.used[i] {
			u.used[i] = true
			u.held++
			u.next = (i + 1) % n
			return i, nil
		}
	}
	return 0, fmt.Errorf("fleet: all %d cell uids of the zygote are in use", n)
}

func (u *cellUIDs) host(i int) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.first + 1 + i
}

// put gives a cell's uid back, once every process of the cell is gone.
func (u *cellUIDs) put(i int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.used[i] {
		u.used[i] = false
		u.held--
	}
	u.releaseIfDone()
}

// close gives the range back to the host once no cell holds a uid of it
// (the zygote is gone by then: its cells end with it).
func (u *cellUIDs) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	u.releaseIfDone()
}

func (u *cellUIDs) releaseIfDone() {
	if u.closed && u.held == 0 && u.first != 0 {
		jail.ReleaseUIDs(u.first, 1+len(u.used))
		u.first = 0
	}
}
