// Package policy holds what a run may do: import lists, limits and their
// bounds. It decides; the jail enforces.
package policy

import "slices"

// BasicModules are the modules of the default profile: computation, text
// and data formats, nothing that touches files, processes or the network.
var BasicModules = []string{
	"abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "contextlib",
	"copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "fractions", "functools",
	"hashlib", "heapq", "hmac", "html", "itertools", "json", "math", "numbers", "operator", "pprint",
	"random", "re", "secrets", "statistics", "string", "struct", "textwrap", "time", "typing",
	"unicodedata", "urllib", "uuid", "xml", "zlib", "__future__",
}

// AllImports, alone in a list, switches the import policy off. The jail
// stays: the policy is a convenience for users, never the wall.
const AllImports = "*"

// ImportList resolves a requested list of modules: nil or empty selects the
// basic profile, ["*"] returns nil (policy off), anything else is used as is.
func ImportList(requested []string) []string {
	if len(requested) == 0 {
		return slices.Clone(BasicModules)
	}
	if slices.Contains(requested, AllImports) {
		return nil
	}
	return slices.Clone(requested)
}
