//go:build !linux

package runtime

import (
	"errors"
	"syscall"
)

// ReadPidfd needs Linux: pidfds and zygote cells exist only there.
func ReadPidfd(syscall.Conn) (int, error) {
	return -1, errors.New("runtime: zygote cells need Linux")
}
