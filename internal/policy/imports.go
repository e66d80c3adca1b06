// Package policy holds what a run may do: profiles and import lists, limits
// and their bounds, and the operator's configuration. It decides; the jail
// enforces.
package policy

// BasicModules are the modules of the default profile: computation, text
// and data formats, nothing that touches files, processes or the network.
var BasicModules = []string{
	"__future__", "abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections",
	"contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "fractions",
	"functools", "graphlib", "hashlib", "heapq", "hmac", "html", "itertools", "json", "math", "numbers",
	"operator", "pprint", "random", "re", "secrets", "statistics", "string", "struct", "textwrap", "time",
	"typing", "unicodedata", "urllib.parse", "uuid", "xml", "zlib", "zoneinfo",
}

// AllImports, alone in a list, switches the import policy off. The jail
// stays: the policy is a convenience for users, never the wall.
const AllImports = "*"
