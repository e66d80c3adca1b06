package envstore

import (
	"fmt"
	"path"
	"strings"
)

// maxPathBytes is the longest entry path taken (Linux's PATH_MAX).
const maxPathBytes = 4096

// entryPath cleans a tar entry's name into a path relative to the root,
// refusing one that is absolute, escapes with "..", is too long or too
// deep. "" means the root itself.
func entryPath(name string, maxDepth int) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("empty name")
	case len(name) > maxPathBytes:
		return "", fmt.Errorf("path over %d bytes", maxPathBytes)
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("NUL in path")
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("absolute path")
	}
	p := path.Clean(name)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("path escapes the root")
	}
	if p == "." {
		return "", nil
	}
	if strings.Count(p, "/")+1 > maxDepth {
		return "", fmt.Errorf("path deeper than %d components", maxDepth)
	}
	return p, nil
}

// splitPath splits a cleaned path into its directory ("" for the root)
// and last component.
func splitPath(p string) (string, string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// whiteout prefixes (the OCI image spec's, from AUFS).
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)
