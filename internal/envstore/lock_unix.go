//go:build unix

package envstore

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lock takes the store's exclusive lock (flock on its directory), so
// commits, removals and collections of every process using the store run
// one at a time; unlock with the returned function.
func (s *Store) lock() (func(), error) {
	f, err := os.Open(s.dir)
	if err != nil {
		return nil, fmt.Errorf("envstore: lock: %w", err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("envstore: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// tryLock takes an exclusive lock on f without waiting; false: another
// holder has it.
func tryLock(f *os.File) bool {
	return flock(f, unix.LOCK_EX|unix.LOCK_NB) == nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}
