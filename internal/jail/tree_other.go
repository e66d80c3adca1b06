//go:build !linux

package jail

// openRootTree needs openat2: an environment's root is read on Linux only.
func openRootTree(root string) (tree, error) { return nil, ProbeHost().Usable() }
