package upstream

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

func schema(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad test schema %s: %v", s, err)
	}
	return m
}

func TestPythonName(t *testing.T) {
	for in, want := range map[string]string{
		"query":       "query",
		"getUser":     "getUser",
		"from":        "from_",
		"class":       "class_",
		"None":        "None_",
		"match":       "match", // a soft keyword is a fine name
		"x-y":         "x_y",
		"get-sum":     "get_sum",
		"a.b/c d":     "a_b_c_d",
		"2fa":         "_2fa",
		"":            "_",
		"_private":    "_private",
		"naïve":       "na_ve",
		"from_":       "from_",
		"$ref":        "_ref",
		"x-y-already": "x_y_already",
	} {
		if got := PythonName(in); got != want {
			t.Errorf("PythonName(%q) = %q, want %q", in, got, want)
		}
		if got := PythonName(PythonName(in)); got != want {
			t.Errorf("PythonName is not idempotent on %q: %q", in, got)
		}
	}
}

var signatureCases = []struct {
	name   string
	tool   string // name
	desc   string
	input  string
	output string
	want   string
}{
	{
		name: "the brief's example",
		tool: "search_issues",
		desc: "Search the issues of a repository.",
		input: `{"type": "object", "properties": {
			"query": {"type": "string", "description": "Words to look for."},
			"limit": {"type": "integer", "default": 10, "description": "How many to return."},
			"labels": {"type": "array", "items": {"type": "string"}}
		}, "required": ["query"]}`,
		output: `{"type": "object"}`,
		want: `def search_issues(query: str, *, labels: list[str] | None = None, limit: int = 10) -> dict:
    """Search the issues of a repository.

    Args:
        query: Words to look for.
        limit: How many to return.
    """
`,
	},
	{
		name:  "nothing at all",
		tool:  "ping",
		input: `{"type": "object"}`,
		want: `def ping() -> Any:
    ...
`,
	},
	{
		name:  "only optional arguments",
		tool:  "list",
		input: `{"type": "object", "properties": {"page": {"type": "integer"}}}`,
		want: `def list(*, page: int | None = None) -> Any:
    ...
`,
	},
	{
		name: "types",
		tool: "types",
		input: `{"type": "object", "properties": {
			"mode": {"enum": ["fast", "slow"], "type": "string"},
			"level": {"enum": [1, 2, 3]},
			"count": {"type": "integer"},
			"ratio": {"type": "number"},
			"flag": {"type": "boolean", "default": false},
			"tags": {"type": "array"},
			"matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
			"meta": {"type": "object"},
			"nested": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
			"people": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
			"env": {"type": "object", "additionalProperties": {"type": "string"}},
			"nullable": {"type": ["string", "null"]},
			"either": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "string"}]},
			"maybe": {"oneOf": [{"type": "null"}, {"type": "number"}]},
			"kind": {"const": "issue"},
			"whatever": {},
			"ref": {"$ref": "#/$defs/thing"},
			"mixed": {"anyOf": [{"type": "string"}, {}]}
		}, "required": ["mode", "level", "count", "ratio"]}`,
		want: `def types(mode: Literal["fast", "slow"], level: Literal[1, 2, 3], count: int, ratio: float, *, either: str | int | None = None, env: dict[str, str] | None = None, flag: bool = False, kind: Literal["issue"] | None = None, matrix: list[list[float]] | None = None, maybe: float | None = None, meta: dict | None = None, mixed: Any = None, nested: dict | None = None, nullable: str | None = None, people: list[dict] | None = None, ref: Any = None, tags: list[Any] | None = None, whatever: Any = None) -> Any:
    ...
`,
	},
	{
		name: "names that are not Python identifiers",
		tool: "get-sum",
		desc: "Adds.",
		input: `{"type": "object", "properties": {
			"from": {"type": "string", "description": "Start."},
			"x-y": {"type": "number"},
			"2fa": {"type": "string", "description": "A code."},
			"class": {"type": "string"},
			"a-b": {"type": "integer", "description": "First a-b."},
			"a_b": {"type": "integer", "description": "Second a_b."}
		}, "required": ["from", "x-y"]}`,
		want: `def get_sum(from_: str, x_y: float, *, _2fa: str | None = None, a_b: int | None = None, a_b_2: int | None = None, class_: str | None = None) -> Any:
    """Adds.

    Args:
        from_: Start.
        _2fa: A code.
        a_b: First a-b.
        a_b_2: Second a_b.
    """
`,
	},
	{
		name:  "a keyword for a tool name",
		tool:  "import",
		input: `{"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path", "missing"]}`,
		want: `def import_(path: str, missing: Any) -> Any:
    ...
`,
	},
	{
		name: "defaults",
		tool: "defaults",
		input: `{"type": "object", "properties": {
			"s": {"type": "string", "default": "say \"hi\"\n"},
			"f": {"type": "number", "default": 0.5},
			"big": {"type": "number", "default": 1e300},
			"n": {"type": ["integer", "null"], "default": null},
			"l": {"type": "array", "items": {"type": "integer"}, "default": [1, 2]},
			"o": {"type": "object", "default": {"b": true, "a": "x<y"}},
			"req": {"type": "string", "default": "ignored for a required argument"}
		}, "required": ["req"]}`,
		want: `def defaults(req: str, *, big: float = 1e+300, f: float = 0.5, l: list[int] = [1, 2], n: int | None = None, o: dict = {"a": "x<y", "b": True}, s: str = "say \"hi\"\n") -> Any:
    ...
`,
	},
	{
		name: "descriptions over several lines, quotes and backslashes",
		tool: "doc",
		desc: "First line.\n\n  Indented detail with \"\"\"quotes\"\"\" and C:\\path.  \n",
		input: `{"type": "object", "properties": {
			"q": {"type": "string", "description": "Line one.\nLine two."}
		}, "required": ["q"]}`,
		want: `def doc(q: str) -> Any:
    """First line.

      Indented detail with \"\"\"quotes\"\"\" and C:\\path.

    Args:
        q: Line one.
            Line two.
    """
`,
	},
	{
		name:  "arguments described, the tool not",
		tool:  "nodesc",
		input: `{"type": "object", "properties": {"q": {"type": "string", "description": "The query."}}, "required": ["q"]}`,
		want: `def nodesc(q: str) -> Any:
    """Args:
        q: The query.
    """
`,
	},
}

func TestSignature(t *testing.T) {
	var all strings.Builder
	all.WriteString("from typing import Any, Literal\n\n")
	for _, tc := range signatureCases {
		tool := Tool{Server: "s", Name: tc.tool, Description: tc.desc, InputSchema: schema(t, tc.input)}
		if tc.output != "" {
			tool.OutputSchema = schema(t, tc.output)
		}
		got := Signature(tool)
		if got != tc.want {
			t.Errorf("%s: Signature =\n%s\nwant\n%s", tc.name, got, tc.want)
		}
		all.WriteString(got)
		all.WriteString("\n")
	}
	// Every stub is Python that compiles.
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to check the stubs: %v", err)
	}
	cmd := exec.Command(py, "-c", "import ast, sys; ast.parse(sys.stdin.read())")
	cmd.Stdin = strings.NewReader(all.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the stubs do not parse as Python: %v\n%s\n%s", err, out, all.String())
	}
}

func TestArgNames(t *testing.T) {
	tool := Tool{Name: "t", InputSchema: schema(t, `{"type": "object", "properties": {
		"from": {}, "x-y": {}, "plain": {}, "a-b": {}, "a_b": {}
	}, "required": ["from"]}`)}
	want := map[string]string{"from_": "from", "x_y": "x-y", "plain": "plain", "a_b": "a-b", "a_b_2": "a_b"}
	if got := ArgNames(tool); !reflect.DeepEqual(got, want) {
		t.Errorf("ArgNames = %v, want %v", got, want)
	}
}
