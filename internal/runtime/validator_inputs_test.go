package runtime

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// validatorCase is one input with what the reply must say. errors and
// warnings list substrings, one per expected entry, in order; nil warnings
// means none.
type validatorCase struct {
	name      string
	code      string
	allowed   []string // nil: testBasic
	valid     bool
	errors    []string
	warnings  []string
	syntax    []int // line, column of syntax_error; nil: none expected
	syntaxMsg string
	check     func(t *testing.T, rep validatorReply)
}

func TestValidatorTrickyInputs(t *testing.T) {
	t.Parallel()
	big := bigProgram(1 << 20)
	cases := []validatorCase{
		{name: "syntax error", code: "x = 1\nif x\n    pass\n", errors: []string{"Line 2: SyntaxError: expected ':'"},
			syntax: []int{2, 5}, syntaxMsg: "expected ':'", check: func(t *testing.T, rep validatorReply) {
				if rep.SyntaxError.Text != "if x" || rep.Analysis.LineCount != 3 || rep.Analysis.CharacterCount != 20 {
					t.Errorf("text %v analysis %+v", rep.SyntaxError.Text, rep.Analysis)
				}
				if rep.Validation.Message != "Syntax error" {
					t.Errorf("message %q", rep.Validation.Message)
				}
			}},
		{name: "NUL byte", code: "x = 1\ny = 'a\x00'\n", errors: []string{"Line 2: SyntaxError: source code string cannot contain null bytes"},
			syntax: []int{2, 7}, syntaxMsg: "null bytes"},
		{name: "compile-time error", code: "def f():\n    pass\nreturn 5\n", errors: []string{"Line 3: SyntaxError: 'return' outside function"},
			syntax: []int{3, 1}, check: func(t *testing.T, rep validatorReply) {
				if rep.SyntaxError.Text != "return 5" || rep.Analysis.Functions != 1 {
					t.Errorf("text %v analysis %+v", rep.SyntaxError.Text, rep.Analysis)
				}
			}},
		{name: "empty", code: "", valid: true, check: func(t *testing.T, rep validatorReply) {
			if a := rep.Analysis; a.LineCount != 0 || a.CharacterCount != 0 || a.EstimatedComplexity != "low" {
				t.Errorf("analysis %+v", a)
			}
			if !anyContains(rep.Recommendations, "no statements") {
				t.Errorf("recommendations %q", rep.Recommendations)
			}
		}},
		{name: "only comments", code: "# a comment\n# another\n", valid: true, check: func(t *testing.T, rep validatorReply) {
			if rep.Analysis.LineCount != 2 || rep.Analysis.CharacterCount != 22 {
				t.Errorf("analysis %+v", rep.Analysis)
			}
		}},
		{name: "unicode identifiers", code: "π = 3.14159\nnaïve_größe = π * 2\nprint(naïve_größe)\n", valid: true, check: func(t *testing.T, rep validatorReply) {
			// Characters, not bytes.
			if rep.Analysis.CharacterCount != 51 || rep.Analysis.LineCount != 3 {
				t.Errorf("analysis %+v", rep.Analysis)
			}
			if len(rep.Recommendations) != 0 {
				t.Errorf("recommendations %q", rep.Recommendations)
			}
		}},
		{name: "__import__", code: "m = __import__('os')\nm.getcwd()",
			errors: []string{"Line 1: Import 'os' is not allowed in profile basic"}, warnings: []string{"Line 1: __import__() imports 'os' dynamically"},
			check: wantImports("os")},
		{name: "importlib.import_module", code: "import importlib\nsp = importlib.import_module('subprocess')\n",
			errors:   []string{"Line 1: Import 'importlib' is not allowed", "Line 2: Import 'subprocess' is not allowed"},
			warnings: []string{"Line 2: importlib.import_module() imports 'subprocess' dynamically"}, check: wantImports("importlib", "subprocess")},
		{name: "from os import path", code: "from os import path\nprint(path.join('a', 'b'))",
			errors: []string{"Line 1: Import 'os' is not allowed in profile basic; it is available in profile filesystem"}, check: wantImports("os")},
		{name: "import os.path as p", code: "import os.path as p\np.join('a', 'b')",
			errors: []string{"Line 1: Import 'os.path' is not allowed in profile basic; it is available in profile filesystem"}, check: wantImports("os")},
		{name: "relative import", code: "from . import helpers\nfrom ..pkg import thing as t\n", valid: true, check: wantImports()},
		{name: "subclasses walk", code: "for c in ().__class__.__base__.__subclasses__():\n    print(c.__name__)\n", valid: true,
			warnings: []string{"Line 1: accesses __class__, __base__, __subclasses__"}},
		{name: "eval(input())", code: "eval(input())", valid: true,
			warnings: []string{"Line 1: eval() runs dynamic code", "Line 1: input() reads stdin"}},
		{name: "exec(compile())", code: "exec(compile('print(1)', '<s>', 'exec'))", valid: true,
			warnings: []string{"Line 1: exec() runs dynamic code", "Line 1: compile() runs dynamic code"}},
		{name: "decorator and lambda", code: "import functools\n\n@functools.lru_cache(maxsize=None)\ndef twice(x):\n    return (lambda y: y * 2)(x)\n\nprint(sorted([3, 1], key=lambda v: -v), twice(2))\n",
			valid: true, check: func(t *testing.T, rep validatorReply) {
				if a := rep.Analysis; a.Functions != 3 || a.MaxNesting != 1 || !slices.Equal(a.Imports, []string{"functools"}) {
					t.Errorf("analysis %+v", a)
				}
			}},
		{name: "walrus and match", code: "if (n := 10) > 5:\n    match n:\n        case 10 | 11:\n            print('ten')\n        case {'k': v, **rest}:\n            print(v, rest)\n        case [first, *others]:\n            print(first)\n        case Point(x=0) if n:\n            pass\n        case _:\n            pass\n",
			valid: true, check: func(t *testing.T, rep validatorReply) {
				// if, match; case clauses are no level of their own (like except).
				if rep.Analysis.MaxNesting != 2 {
					t.Errorf("analysis %+v", rep.Analysis)
				}
			}},
		{name: "async", code: "async def main(lock, gen, other):\n    await other()\n    async for x in gen():\n        print(x)\n    async with lock:\n        return [y async for y in gen()]\n",
			valid: true, check: func(t *testing.T, rep validatorReply) {
				if a := rep.Analysis; a.Functions != 1 || a.Loops != 2 || a.MaxNesting != 2 {
					t.Errorf("analysis %+v", a)
				}
			}},
		{name: "f-string nested quotes", code: "name = 'x'\nd = {'k': 1}\nprint(f\"{name!r:>10} {d['k']} {f'{name}'} {'{'}\")\n", valid: true},
		{name: "while True", code: "while True:\n    pass", valid: true,
			warnings: []string{"Line 1: 'while True' loop has no break"}, check: func(t *testing.T, rep validatorReply) {
				if !anyContains(rep.Recommendations, "timeout") {
					t.Errorf("recommendations %q", rep.Recommendations)
				}
			}},
		{name: "loops that end", valid: true,
			code: "i = 0\nwhile True:\n    i += 1\n    if i > 3:\n        break\ndef gen():\n    while 1:\n        yield i\ntry:\n    while True:\n        [].pop()\nexcept IndexError:\n    pass\nprint(i)\n"},
		{name: "self-recursive function", code: "def fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)\nprint(fact(5))\n", valid: true,
			warnings: []string{"Line 1: function 'fact' calls itself; recursion deeper than Python's limit"}},
		{name: "not recursion", valid: true,
			code: "def key(x):\n    return x\nclass A:\n    def key(self, x):\n        return key(x)\nprint(A().key(1))\n"},
		{name: "shadowed builtins", valid: true, code: "def eval(x):\n    return x\nopen = print\neval(1)\nopen(2)\n"},
		{name: "escape introspection", valid: true,
			code:     "import sys\nf = sys._getframe().f_back.f_globals\ng = getattr(f, '__builtins__')\nh = getattr(g, name)\n",
			allowed:  append(slices.Clone(testBasic), "sys"),
			warnings: []string{"Line 2: accesses f_back, f_globals", "Line 3: accesses __builtins__", "Line 4: getattr() with a computed attribute name"}},
		{name: "1 MB", code: big, valid: true, check: func(t *testing.T, rep validatorReply) {
			if a := rep.Analysis; a.LineCount != strings.Count(big, "\n") || a.CharacterCount != len(big) || a.EstimatedComplexity != "high" || a.Functions == 0 {
				t.Errorf("analysis %+v", a)
			}
		}},
		{name: "deep parentheses", code: strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000),
			errors: []string{"Line 1: SyntaxError: too many nested parentheses"}, syntax: []int{1, 201}},
		{name: "deep unary", code: strings.Repeat("-", 100000) + "1",
			errors: []string{"SyntaxError: code is nested too deeply or too large to parse (MemoryError)"}, syntaxMsg: "nested too deeply"},
		{name: "deep binary", code: "x = " + strings.Repeat("1+", 100000) + "1",
			errors: []string{"SyntaxError: code is nested too deeply to parse (RecursionError"}, syntaxMsg: "nested too deeply"},
		{name: "deep attributes", code: "a" + strings.Repeat(".b", 2500),
			errors: []string{"SyntaxError: code is nested too deeply to parse (RecursionError"}, syntaxMsg: "nested too deeply"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			allowed := tc.allowed
			if allowed == nil {
				allowed = testBasic
			}
			// Quadratic work shows in the validator's CPU time; wall time
			// grows with the load beside it (these cases run in parallel).
			rep, cpu := runValidatorCPU(t, validateReq(tc.code, allowed, "basic"))
			if cpu > 10*time.Second {
				t.Errorf("took %v of CPU", cpu)
			} else if len(tc.code) > 100000 {
				t.Logf("%d bytes in %v of CPU", len(tc.code), cpu)
			}
			v := rep.Validation
			if v.Valid != tc.valid || v.Valid != (len(v.Errors) == 0) {
				t.Errorf("valid %v, errors %q", v.Valid, v.Errors)
			}
			checkList(t, "errors", v.Errors, tc.errors)
			checkList(t, "warnings", v.Warnings, tc.warnings)
			wantMessage := map[bool]string{true: "Code is valid", false: "Code contains restricted operations"}[tc.valid]
			if tc.syntax != nil || tc.syntaxMsg != "" {
				wantMessage = "Syntax error"
				if rep.SyntaxError == nil {
					t.Fatalf("no syntax_error")
				}
				if !strings.Contains(rep.SyntaxError.Message, tc.syntaxMsg) {
					t.Errorf("syntax_error message %q", rep.SyntaxError.Message)
				}
				if tc.syntax != nil && (rep.SyntaxError.Line == nil || rep.SyntaxError.Column == nil ||
					*rep.SyntaxError.Line != tc.syntax[0] || *rep.SyntaxError.Column != tc.syntax[1]) {
					t.Errorf("syntax_error at %v:%v, want %v", deref(rep.SyntaxError.Line), deref(rep.SyntaxError.Column), tc.syntax)
				}
				if rep.Analysis.CharacterCount != len([]rune(tc.code)) {
					t.Errorf("character_count %d", rep.Analysis.CharacterCount)
				}
			} else if rep.SyntaxError != nil {
				t.Errorf("syntax_error %+v", *rep.SyntaxError)
			}
			if v.Message != wantMessage {
				t.Errorf("message %q, want %q", v.Message, wantMessage)
			}
			if tc.check != nil {
				tc.check(t, rep)
			}
		})
	}
}

func checkList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s %q, want %d matching %q", what, got, len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("%s[%d] %q, want it to contain %q", what, i, got[i], want[i])
		}
	}
}

func wantImports(mods ...string) func(t *testing.T, rep validatorReply) {
	return func(t *testing.T, rep validatorReply) {
		t.Helper()
		if got := rep.Analysis.Imports; !slices.Equal(got, mods) {
			t.Errorf("imports %q, want %q", got, mods)
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// bigProgram is valid Python of at least n bytes: functions with loops and
// branches, each used once.
func bigProgram(n int) string {
	var b strings.Builder
	b.WriteString("import math\n")
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "def f%d(x):\n    total = 0\n    for i in range(x):\n        if i %% 3 == 0:\n            total += math.sqrt(i)\n        elif i %% 3 == 1:\n            total -= i\n    return [y * 2 for y in range(total and 3)]\nprint(f%d(%d))\n", i, i, i%50)
	}
	return b.String()
}
