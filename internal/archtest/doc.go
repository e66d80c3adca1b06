// Package archtest holds the repository's layering rules as a test: a
// package that imports across the layers fails it. It has no code of its
// own.
package archtest
