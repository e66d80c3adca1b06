//go:build !linux

package jail

// openRootTree needs openat2: an environment's root is read on Linux only.
func openRootTree(root string) (tree, error) { return nil, ProbeHost().Usable() }

// RootTopLevel: an environment's root is read on Linux only.
func RootTopLevel(root, home string) ([]RootMount, []string, error) {
	return nil, nil, ProbeHost().Usable()
}
