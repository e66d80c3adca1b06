package upstream

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// pythonKeywords are the hard keywords: names Python code cannot use as
// identifiers. (Soft keywords such as match and type are fine.)
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true,
	"assert": true, "async": true, "await": true, "break": true, "class": true,
	"continue": true, "def": true, "del": true, "elif": true, "else": true,
	"except": true, "finally": true, "for": true, "from": true, "global": true,
	"if": true, "import": true, "in": true, "is": true, "lambda": true,
	"nonlocal": true, "not": true, "or": true, "pass": true, "raise": true,
	"return": true, "try": true, "while": true, "with": true, "yield": true,
}

// PythonName turns a tool or property name into a Python identifier: every
// character outside [A-Za-z0-9_] becomes "_", a leading digit gets a "_"
// prefix, and a keyword gets a "_" suffix ("from" -> "from_",
// "x-y" -> "x_y", "2fa" -> "_2fa"). Names that are already identifiers and
// not keywords are unchanged, so PythonName(PythonName(s)) == PythonName(s).
func PythonName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	switch {
	case out == "":
		return "_"
	case out[0] >= '0' && out[0] <= '9':
		return "_" + out
	case pythonKeywords[out]:
		return out + "_"
	}
	return out
}

// param is one argument of a tool's Python stub.
type param struct {
	name     string // the property's own name
	pyName   string // its Python name, unique within the stub
	typ      string // Python annotation
	required bool
	dflt     string // Python literal of the schema default, "" if none
	desc     string
}

// params lists a tool's arguments in stub order: the required properties in
// the order of the schema's "required" list, then the optional ones sorted
// by name (a decoded schema has lost its property order). Python names that
// would collide get "_2", "_3", ... in that order.
func params(t Tool) []param {
	props, _ := t.InputSchema["properties"].(map[string]any)
	var required []string
	if rs, ok := t.InputSchema["required"].([]any); ok {
		for _, r := range rs {
			if s, ok := r.(string); ok && !slices.Contains(required, s) {
				required = append(required, s)
			}
		}
	}
	var optional []string
	for name := range props {
		if !slices.Contains(required, name) {
			optional = append(optional, name)
		}
	}
	slices.Sort(optional)

	used := map[string]bool{}
	var out []param
	add := func(name string, req bool) {
		schema, _ := props[name].(map[string]any)
		p := param{name: name, required: req, typ: pyType(schema)}
		p.pyName = PythonName(name)
		for i := 2; used[p.pyName]; i++ {
			p.pyName = fmt.Sprintf("%s_%d", PythonName(name), i)
		}
		used[p.pyName] = true
		if d, ok := schema["default"]; ok && !req {
			p.dflt = pyLiteral(d)
		}
		p.desc, _ = schema["description"].(string)
		out = append(out, p)
	}
	for _, n := range required {
		add(n, true)
	}
	for _, n := range optional {
		add(n, false)
	}
	return out
}

// ArgNames maps the Python names Signature gives a tool's parameters back
// to the tool's own property names, for turning a call's keyword arguments
// into the tool's arguments.
func ArgNames(t Tool) map[string]string {
	m := map[string]string{}
	for _, p := range params(t) {
		m[p.pyName] = p.name
	}
	return m
}

// Signature renders a tool as a Python stub for a model to read:
//
//	def search_issues(query: str, *, limit: int = 10, labels: list[str] | None = None) -> dict:
//	    """Search the issues.
//
//	    Args:
//	        query: Words to look for.
//	        limit: How many to return.
//	    """
//
// Required properties come first (positional-or-keyword, in the schema's
// "required" order), optional ones are keyword-only (sorted by name) with
// their schema default or None. JSON types map to str, int, float, bool,
// None, list[...] and dict; enums and consts to Literal[...]; anything else
// to Any. The return type is dict when the tool has an output schema, else
// Any. Names go through PythonName (see ArgNames for the way back). The stub
// is valid Python given `from typing import Any, Literal`.
func Signature(t Tool) string {
	ps := params(t)
	var args []string
	star := false
	for _, p := range ps {
		if !p.required && !star {
			args = append(args, "*")
			star = true
		}
		switch {
		case p.required:
			args = append(args, p.pyName+": "+p.typ)
		case p.dflt != "":
			args = append(args, p.pyName+": "+p.typ+" = "+p.dflt)
		case p.typ == "Any" || p.typ == "None" || strings.HasSuffix(p.typ, " | None"):
			args = append(args, p.pyName+": "+p.typ+" = None")
		default:
			args = append(args, p.pyName+": "+p.typ+" | None = None")
		}
	}
	ret := "Any"
	if t.OutputSchema != nil {
		ret = "dict"
	}

	var b strings.Builder
	fmt.Fprintf(&b, "def %s(%s) -> %s:\n", PythonName(t.Name), strings.Join(args, ", "), ret)

	var doc []string
	if d := strings.TrimSpace(t.Description); d != "" {
		doc = append(doc, strings.Split(d, "\n")...)
	}
	var argDocs []string
	for _, p := range ps {
		d := strings.TrimSpace(p.desc)
		if d == "" {
			continue
		}
		lines := strings.Split(d, "\n")
		argDocs = append(argDocs, "    "+p.pyName+": "+strings.TrimSpace(lines[0]))
		for _, l := range lines[1:] {
			argDocs = append(argDocs, "        "+strings.TrimSpace(l))
		}
	}
	if len(argDocs) > 0 {
		if len(doc) > 0 {
			doc = append(doc, "")
		}
		doc = append(doc, "Args:")
		doc = append(doc, argDocs...)
	}
	if len(doc) == 0 {
		b.WriteString("    ...\n")
		return b.String()
	}
	b.WriteString(`    """`)
	for i, l := range doc {
		l = strings.TrimRight(docEscape(l), " \t\r")
		if i > 0 && l != "" {
			b.WriteString("    ")
		}
		b.WriteString(l)
		b.WriteString("\n")
	}
	b.WriteString("    \"\"\"\n")
	return b.String()
}

// docEscape keeps text inside a """ docstring: its backslashes and quotes
// can neither end the string nor start an escape.
func docEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return strings.ReplaceAll(s, `"""`, `\"\"\"`)
}

// pyType maps a JSON schema to a Python annotation.
func pyType(s map[string]any) string {
	if s == nil {
		return "Any"
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		lits := make([]string, len(e))
		for i, v := range e {
			lits[i] = pyLiteral(v)
		}
		return "Literal[" + strings.Join(lits, ", ") + "]"
	}
	if c, ok := s["const"]; ok {
		return "Literal[" + pyLiteral(c) + "]"
	}
	switch t := s["type"].(type) {
	case string:
		return pyScalarType(t, s)
	case []any:
		var parts []string
		for _, x := range t {
			n, _ := x.(string)
			parts = append(parts, pyScalarType(n, s))
		}
		return pyUnion(parts)
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[key].([]any); ok && len(alts) > 0 {
			var parts []string
			for _, a := range alts {
				m, _ := a.(map[string]any)
				parts = append(parts, pyType(m))
			}
			return pyUnion(parts)
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) == 1 {
		m, _ := all[0].(map[string]any)
		return pyType(m)
	}
	return "Any"
}

func pyScalarType(t string, s map[string]any) string {
	switch t {
	case "string":
		return "str"
	case "integer":
		return "int"
	case "number":
		return "float"
	case "boolean":
		return "bool"
	case "null":
		return "None"
	case "array":
		items, _ := s["items"].(map[string]any)
		return "list[" + pyType(items) + "]"
	case "object":
		if ap, ok := s["additionalProperties"].(map[string]any); ok && len(ap) > 0 {
			if _, hasProps := s["properties"]; !hasProps {
				return "dict[str, " + pyType(ap) + "]"
			}
		}
		return "dict"
	}
	return "Any"
}

// pyUnion joins alternatives, dropping repeats and keeping None last; any
// Any makes the whole union Any.
func pyUnion(parts []string) string {
	var out []string
	none := false
	for _, p := range parts {
		switch {
		case p == "Any":
			return "Any"
		case p == "None":
			none = true
		case !slices.Contains(out, p):
			out = append(out, p)
		}
	}
	if none {
		out = append(out, "None")
	}
	return strings.Join(out, " | ")
}

// pyLiteral renders a decoded JSON value as a Python literal.
func pyLiteral(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return strconv.FormatInt(int64(v), 10)
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	case json.Number:
		return v.String()
	case string:
		// A JSON string literal is a valid Python one, escapes included.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		return strings.TrimSuffix(b.String(), "\n")
	case []any:
		items := make([]string, len(v))
		for i, x := range v {
			items[i] = pyLiteral(x)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		items := make([]string, len(keys))
		for i, k := range keys {
			items[i] = pyLiteral(k) + ": " + pyLiteral(v[k])
		}
		return "{" + strings.Join(items, ", ") + "}"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
