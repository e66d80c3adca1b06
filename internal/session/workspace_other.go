//go:build !linux

package session

import "os"

func mountWorkspace(string, int64) (bool, error) { return false, nil }

func removeWorkspace(dir string) { _ = os.RemoveAll(dir) }
