//go:build unix

package snapstore

import (
	"os"

	"golang.org/x/sys/unix"
)

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			return err
		}
	}
}

func funlock(f *os.File) { unix.Flock(int(f.Fd()), unix.LOCK_UN) }
