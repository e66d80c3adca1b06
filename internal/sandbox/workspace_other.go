//go:build !linux

package sandbox

import "os"

func mountWorkspace(string, int64) error { return nil }

func removeWorkspace(dir string) { _ = os.RemoveAll(dir) }
