package jail

// RootMount is one path of a sandbox with a root, for a backend that binds
// by host path (gVisor's gofer opens its mounts' sources by path): a
// symlink to recreate (Link), or Source, the real host path beneath the
// root to bind read-only at Path.
type RootMount struct {
	Path, Link, Source string
	Dir                bool
}
