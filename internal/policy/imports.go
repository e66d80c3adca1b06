// Package policy holds what a run may do: profiles and import lists, limits
// and their bounds, commands and packages. It decides, from what the
// operator allows (Operator, embedded in config.Config); the jail enforces.
package policy

// BasicModules are the modules of the profile every run has: the standard
// library's computation, text, data-format and language modules, the ones
// ordinary code (and every HumanEval and MBPP program) imports. None exists
// to reach files, processes or the network; those are the other profiles'.
// The list is a convenience that gives clear errors, not the wall: sys,
// io or threading give code nothing the kernel jail does not bound.
var BasicModules = []string{
	"__future__", "abc", "argparse", "array", "ast", "asyncio", "base64", "binascii", "bisect",
	"calendar", "cmath", "codecs", "collections", "colorsys", "concurrent", "contextlib", "contextvars",
	"copy", "copyreg", "csv", "dataclasses", "datetime", "decimal", "difflib", "dis", "doctest", "enum",
	"errno", "fnmatch", "fractions", "functools", "gc", "getopt", "graphlib", "hashlib", "heapq", "hmac",
	"html", "importlib", "inspect", "io", "itertools", "json", "keyword", "logging", "math", "numbers", "operator",
	"pickle", "pprint", "queue", "random", "re", "reprlib", "secrets", "shlex", "statistics", "string",
	"struct", "sys", "textwrap", "threading", "time", "timeit", "token", "tokenize", "traceback", "types",
	"typing", "typing_extensions", "unicodedata", "unittest", "urllib.parse", "uuid", "warnings",
	"weakref", "xml", "zlib", "zoneinfo",
}

// AllImports, alone in a list, switches the import policy off. The jail
// stays: the policy is a convenience for users, never the wall.
const AllImports = "*"
