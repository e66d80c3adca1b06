//go:build !linux || !(amd64 || arm64)

package seccomp

import (
	"errors"
	"runtime"
)

// SockFilter mirrors the kernel's struct sock_filter so the API keeps the
// same shape on platforms where the filter is not supported.
type SockFilter struct {
	Code uint16
	Jt   uint8
	Jf   uint8
	K    uint32
}

// errUnsupported is returned by every entry point on this platform.
var errUnsupported = errors.New("seccomp: not supported on " + runtime.GOOS + "/" + runtime.GOARCH)

// Build is not supported on this platform and always returns an error.
func Build(opts Options) ([]SockFilter, error) {
	return nil, errUnsupported
}

// Install is not supported on this platform and always returns an error.
func Install(prog []SockFilter) error {
	return errUnsupported
}

// Lists is empty on this platform: there is no filter.
func Lists() (allowed, denied map[string]int) { return nil, nil }
