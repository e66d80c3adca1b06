//go:build !linux

// Package loopback brings up the loopback interface of a new network
// namespace; there are none here.
package loopback

import "errors"

// Up fails: network namespaces are Linux's.
func Up() error { return errors.New("loopback: network namespaces need Linux") }
