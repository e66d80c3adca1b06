package runtime

import (
	"strings"
)

// Kernel languages besides Python: the harness runs each in a kernel
// process of its own per context (kernels.py): node for JavaScript and
// TypeScript (types stripped by kernel.js), bash for bash.
const (
	LangPython     = "python"
	LangJavaScript = "javascript"
	LangTypeScript = "typescript"
	LangBash       = "bash"
)

// Languages are the kernels a request may name.
var Languages = []string{LangPython, LangJavaScript, LangTypeScript, LangBash}

// NormalizeLanguage names a language as E2B's code interpreter does ("js"
// is javascript, "ts" typescript, "" python), in lower case; ok is false
// for a language no kernel here runs.
func NormalizeLanguage(lang string) (string, bool) {
	l := strings.ToLower(strings.TrimSpace(lang))
	switch l {
	case "", "python", "python3", "py":
		return LangPython, true
	case "js", "javascript", "node":
		return LangJavaScript, true
	case "ts", "typescript":
		return LangTypeScript, true
	case "bash", "sh", "shell":
		return LangBash, true
	}
	return l, false
}
