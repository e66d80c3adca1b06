package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Requests travel in Python's marshal format: marshal.loads is built into
// the interpreter, so the harness needs no module import to read them (json
// costs ~10 ms of start-up through re and enum). Only the types a request
// uses are written, and never references, so any marshal version reads it.
const (
	marshalNull    = '0'
	marshalNone    = 'N'
	marshalTrue    = 'T'
	marshalFalse   = 'F'
	marshalInt     = 'i'
	marshalUnicode = 'u'
	marshalList    = '['
	marshalDict    = '{'
)

// appendMarshal appends v, which must be nil, bool, int, string, []string,
// map[string]string or map[string]any of those.
func appendMarshal(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, marshalNone), nil
	case bool:
		if v {
			return append(b, marshalTrue), nil
		}
		return append(b, marshalFalse), nil
	case int:
		if v < math.MinInt32 || v > math.MaxInt32 {
			return nil, fmt.Errorf("runtime: int %d does not fit marshal's int32", v)
		}
		b = append(b, marshalInt)
		return binary.LittleEndian.AppendUint32(b, uint32(int32(v))), nil
	case string:
		return appendString(b, v)
	case []string:
		if v == nil {
			return append(b, marshalNone), nil
		}
		b = append(b, marshalList)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		var err error
		for _, s := range v {
			if b, err = appendString(b, s); err != nil {
				return nil, err
			}
		}
		return b, nil
	case []any:
		b = append(b, marshalList)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		var err error
		for _, x := range v {
			if b, err = appendMarshal(b, x); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]string:
		// Written like a map[string]any, without boxing every value.
		b = append(b, marshalDict)
		var err error
		for _, k := range sortedKeys(v) {
			if b, err = appendString(b, k); err != nil {
				return nil, err
			}
			if b, err = appendString(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, marshalNull), nil
	case map[string]any:
		b = append(b, marshalDict)
		var err error
		for _, k := range sortedKeys(v) {
			if b, err = appendMarshal(b, k); err != nil {
				return nil, err
			}
			if b, err = appendMarshal(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, marshalNull), nil
	}
	return nil, fmt.Errorf("runtime: cannot marshal %T", v)
}

// appendString appends s as a marshal string. marshal decodes strings as
// UTF-8 and fails on anything else.
func appendString(b []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) > math.MaxInt32 {
		return nil, fmt.Errorf("runtime: string of %d bytes is too long", len(s))
	}
	b = append(b, marshalUnicode)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...), nil
}

// marshalAfter appends the request's encoding to prefix: a frame's header
// goes first, in the same buffer (no copy of a request of a few kB).
func (r Request) marshalAfter(prefix []byte) ([]byte, error) {
	m := map[string]any{
		"code":             r.Code,
		"allowed_imports":  r.AllowedImports,
		"max_result_bytes": r.MaxResultBytes,
		"keep_alive":       r.KeepAlive,
		"capture_plots":    r.CapturePlots,
	}
	if r.EndMarker != "" {
		m["end_marker"] = r.EndMarker
	}
	if r.Profile != "" {
		m["profile"] = r.Profile
	}
	if len(r.ImportHints) > 0 {
		m["import_hints"] = r.ImportHints
	}
	if r.Context != "" {
		m["context"] = r.Context
	}
	if r.NewContext {
		m["new_context"] = true
	}
	if r.Cwd != "" {
		m["cwd"] = r.Cwd
	}
	if len(r.Env) > 0 {
		m["env"] = r.Env
	}
	if r.Display {
		m["display"] = true
	}
	if r.Op != "" {
		m["op"], m["timeout_ms"] = r.Op, r.TimeoutMS
	}
	if r.Language != "" {
		m["language"], m["timeout_ms"] = r.Language, r.TimeoutMS
	}
	if len(r.Tools) > 0 {
		tools := make([]any, len(r.Tools))
		for i, t := range r.Tools {
			params := make([]any, len(t.Params))
			for j, p := range t.Params {
				params[j] = map[string]any{"name": p.Name, "py": p.Py, "required": p.Required, "default": p.Default}
			}
			tools[i] = map[string]any{"server": t.Server, "name": t.Name, "py": t.Py, "doc": t.Doc, "params": params}
		}
		m["tools"] = tools
	}
	// One buffer of about the right size: the import list and the hints
	// are most of a request.
	size := 256 + len(r.Code) + len(r.Profile) + len(r.EndMarker)
	for _, s := range r.AllowedImports {
		size += 5 + len(s)
	}
	for k, v := range r.ImportHints {
		size += 10 + len(k) + len(v)
	}
	return appendMarshal(append(make([]byte, 0, len(prefix)+size), prefix...), m)
}

// sortedKeys returns m's keys in order: a dict's encoding does not depend
// on map iteration.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
