// Package envfixture builds environment roots for tests: a minimal Python
// image made of the host's own files (not the host's root: only what it
// lists), and hostile variants of a root, to check what a sandbox with
// jail.Spec.Root shows and refuses.
package envfixture
