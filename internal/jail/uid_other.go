//go:build !linux

package jail

import "io"

// leaseBlock hands out any block not held here: no sandbox runs on this
// system, so there is no host to share it with.
func leaseBlock(size, count int, held map[int]bool) (*uidBlock, error) {
	for i := range count {
		if base := HostUIDBase + i*size; !held[base] {
			return &uidBlock{base: base, used: make([]bool, size), free: size, lease: io.NopCloser(nil)}, nil
		}
	}
	return nil, ErrNoUIDs
}

// leaseBlockOf hands out the block from base: nothing else holds it here.
func leaseBlockOf(base, size int) (*uidBlock, error) {
	return &uidBlock{base: base, used: make([]bool, size), free: size, lease: io.NopCloser(nil)}, nil
}

// OwnIDMap reports the host's ids: user namespaces are Linux's.
func OwnIDMap() (onHost bool, desc string) { return true, "" }
