//go:build !linux

package frontdoor

// RaiseFileLimit is a no-op off Linux (codecage serves from Linux only):
// the limit is unknown, 0.
func RaiseFileLimit() uint64 { return 0 }
