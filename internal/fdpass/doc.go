// Package fdpass receives a descriptor passed over a Unix socket with
// SCM_RIGHTS: one message, a one-byte tag and exactly one descriptor (a
// cell's pidfd, a build helper's socket). A leaf: it knows no protocol
// beyond that.
package fdpass
