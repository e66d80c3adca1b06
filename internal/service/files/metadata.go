package files

import (
	"fmt"
	"strings"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// A file's metadata (E2B's files.write(..., {metadata})) is kept with the
// file, as user.e2b.<key> extended attributes, as E2B's envd keeps it: the
// code in the sandbox sees it and may set it too, as in E2B's VM. It is
// bounded when written and when read (the code may set more).
const (
	// MaxMetadataKeys bounds a file's metadata entries.
	MaxMetadataKeys = 32
	// MaxMetadataKey bounds a key (an attribute's name is at most 255
	// bytes, "user.e2b." included).
	MaxMetadataKey = 128
	// MaxMetadataBytes bounds a file's keys and values together.
	MaxMetadataBytes = 16 << 10
)

// CheckMetadata refuses metadata a write may not store: keys are HTTP
// tokens (they travel as header names) and values printable ASCII, as
// E2B's SDK requires, within the bounds above. Keys are lowercased, as
// envd does; the result is what is stored.
func CheckMetadata(md map[string]string) (map[string]string, error) {
	if len(md) == 0 {
		return nil, nil
	}
	if len(md) > MaxMetadataKeys {
		return nil, fmt.Errorf("%w: %d metadata entries, over the limit of %d", errdefs.ErrInvalidRequest, len(md), MaxMetadataKeys)
	}
	out := make(map[string]string, len(md))
	total := 0
	for k, v := range md {
		if k == "" || len(k) > MaxMetadataKey || strings.IndexFunc(k, notToken) >= 0 {
			return nil, fmt.Errorf("%w: metadata key %s must be 1 to %d HTTP token characters (letters, digits and !#$%%&'*+-.^_`|~)", errdefs.ErrInvalidRequest, bounded.Quote(bounded.String(k, 200)), MaxMetadataKey)
		}
		if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			return nil, fmt.Errorf("%w: the metadata value of %s must be printable US-ASCII", errdefs.ErrInvalidRequest, bounded.Quote(k))
		}
		total += len(k) + len(v)
		out[strings.ToLower(k)] = v
	}
	if total > MaxMetadataBytes {
		return nil, fmt.Errorf("%w: the metadata holds %d bytes, over the limit of %d", errdefs.ErrInvalidRequest, total, MaxMetadataBytes)
	}
	return out, nil
}

// notToken: r may not be in an HTTP token (RFC 9110).
func notToken(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}
