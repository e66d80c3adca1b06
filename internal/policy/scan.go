package policy

import (
	"strings"
)

// ScanImports returns the modules code names in import statements, at any
// indentation ("import a.b as c, d", "from a.b import c" gives a.b and
// a.b.c), and in literal __import__("x") and import_module("x") calls. It
// is a cheap guess made before the code runs, to pick the sandbox a run
// starts from: it does not parse Python, and what it misses only costs
// speed, never permission (the import policy and the kernel decide those).
//
// It runs before every such run, on code of up to SANDBOX_MAX_CODE_SIZE:
// its cost is linear in the code, and it keeps at most maxScanned names.
func ScanImports(code string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(m string) {
		if m != "" && !strings.HasPrefix(m, ".") && !seen[m] && len(out) < maxScanned {
			seen[m] = true
			out = append(out, m)
		}
	}
	for line := range strings.Lines(code) {
		if len(out) == maxScanned {
			return out
		}
		for stmt := range strings.SplitSeq(line, ";") {
			stmt = strings.TrimSpace(stmt)
			switch {
			case strings.HasPrefix(stmt, "import") && isSpace(stmt, 6):
				for part := range strings.SplitSeq(stmt[6:], ",") {
					name, _, _ := strings.Cut(strings.TrimSpace(strings.Trim(part, "()\\ \t")), " ")
					add(name)
				}
			case strings.HasPrefix(stmt, "from") && isSpace(stmt, 4):
				pkg, names, ok := strings.Cut(strings.TrimSpace(stmt[4:]), " import")
				pkg = strings.TrimSpace(pkg)
				if !ok || pkg == "" || strings.HasPrefix(pkg, ".") {
					continue
				}
				add(pkg)
				// "from urllib import request" imports urllib.request.
				for part := range strings.SplitSeq(names, ",") {
					name, _, _ := strings.Cut(strings.TrimSpace(strings.Trim(part, "()\\ \t")), " ")
					if name != "" && name != "*" && identifier(name) {
						add(pkg + "." + name)
					}
				}
			}
		}
	}
	for _, call := range []string{"__import__(", "import_module("} {
		rest := code
		for {
			i := strings.Index(rest, call)
			if i < 0 {
				break
			}
			rest = rest[i+len(call):]
			arg := strings.TrimSpace(rest)
			if len(arg) > 1 && (arg[0] == '"' || arg[0] == '\'') {
				if end := strings.IndexByte(arg[1:], arg[0]); end > 0 {
					add(arg[1 : 1+end])
				}
			}
		}
	}
	return out
}

// maxScanned bounds the names ScanImports returns: real code imports a
// few dozen modules, and what it leaves out only costs speed.
const maxScanned = 256

// isSpace reports whether s has white space at i (after a keyword).
func isSpace(s string, i int) bool {
	return len(s) > i && (s[i] == ' ' || s[i] == '\t')
}

// identifier reports whether s is a plain Python name (ASCII is enough
// for module names).
func identifier(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}
