package scenarios_test

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
)

// volatile are the fields that differ on every run or host: their values
// become "…" (a null stays null, so a field that should be set and is not
// still shows).
var volatile = map[string]bool{
	"execution_id": true, "execution_time": true, "peak_memory_bytes": true, "cpu_time_seconds": true,
	"idle_cpu_seconds": true, "created_at": true, "last_used": true, "expires_at": true, "modified": true,
	"cgroup": true, "landlock_abi": true, "rootless": true, "seccomp": true, "warnings": true,
	"timestamp": true, "startedAt": true, "endAt": true, "envdAccessToken": true, "trafficAccessToken": true,
	"paused_at": true, "size_bytes": true, "duration_ms": true,
}

// normalize rewrites a JSON answer with volatile values masked, ids and
// the servers' addresses named, keys sorted; a body that is not JSON is
// kept as text (names replaced).
func (p *player) normalize(raw []byte, indent bool) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return p.replace(strings.TrimRight(string(raw), "\n"))
	}
	v = p.mask(v)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
	return strings.TrimRight(b.String(), "\n")
}

func (p *player) mask(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if volatile[k] && x != nil {
				v[k] = "…"
			} else {
				v[k] = p.mask(x)
			}
		}
	case []any:
		for i, x := range v {
			v[i] = p.mask(x)
		}
	case string:
		var inner any // JSON as text (MCP's text content): masked too
		if strings.HasPrefix(v, "{") && json.Unmarshal([]byte(v), &inner) == nil {
			b, _ := json.Marshal(p.mask(inner))
			return string(b)
		}
		return p.replace(v)
	}
	return v
}

// replace names what differs between runs inside a string: the sessions'
// ids and the servers' URLs.
func (p *player) replace(s string) string {
	pairs := []string{p.rest, "$REST", p.e2b, "$E2B"}
	ids := make([]string, 0, len(p.names))
	for id := range p.names {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		pairs = append(pairs, id, p.names[id])
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// rawJSON quotes s as a JSON string but keeps bytes that are not valid
// UTF-8 as they are (encoding/json would turn them into U+FFFD), so that
// a scenario can send what a careless client sends.
func rawJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&15])
		default:
			b.WriteByte(c)
		}
	}
	return b.String() + `"`
}
