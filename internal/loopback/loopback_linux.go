// Package loopback brings up the loopback interface of a new, empty
// network namespace: the jail's sandboxes and envbuild's build tools both
// need it, and neither may import the other.
package loopback

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Up brings up "lo" in the calling thread's network namespace (a
// sandbox's, a build's: empty), so programs can talk to themselves over
// 127.0.0.1 and nothing else.
func Up() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}
