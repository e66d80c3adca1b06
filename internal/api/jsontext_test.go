package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

func TestCheckJSONText(t *testing.T) {
	good := []string{
		`{"code": "print('héllo ✓ 😀')"}`,
		`{"code": "print(\"\\u00e9 \\ud83d\\ude00 \\\" \\\\ \\n\")", "timeout": 3, "allowed_imports": ["math", "json"]}`,
		`{"env": {"A": "b", "ü": "x"}, "nested": [[{"k": null}], true, -1.5e3]}`,
		``, `null`, `[]`, `"plain"`,
		`{"code": "unterminated`, // not JSON: the decoder reports it
		`{"code": "\u12"}`,
	}
	for _, doc := range good {
		if err := CheckJSONText([]byte(doc)); err != nil {
			t.Errorf("%q: %v", doc, err)
		}
	}
	bad := []struct {
		doc  string
		want string
	}{
		{"{\"code\": \"print(1)\xff\"}", "code is not valid UTF-8 (byte 0xff at character 8)"},
		{"{\"code\": \"x\", \"env\": {\"A\": \"ok\", \"LANG\": \"\xc3\x28\"}}", "env.LANG is not valid UTF-8"},
		{"{\"allowed_imports\": [\"math\", \"json\", \"o\xe2\x82s\"]}", "allowed_imports[2] is not valid UTF-8"},
		{"{\"co\xffde\": \"x\"}", "a field name is not valid UTF-8"},
		{`{"code": "a\udc80b"}`, `code is not valid Unicode: an unpaired UTF-16 surrogate \udc80 at character 1`},
		{`{"code": "\ud83d"}`, `code is not valid Unicode: an unpaired UTF-16 surrogate \ud83d`},
		{`{"code": "\ud83d\u0041"}`, `unpaired UTF-16 surrogate \ud83d`},
		{"{\"content\": \"\x80\"}", "content is not valid UTF-8 (byte 0x80 at character 0); send text as UTF-8, and binary data as base64"},
		{"\"\xff\"", "the body is not valid UTF-8"},
	}
	for _, c := range bad {
		err := CheckJSONText([]byte(c.doc))
		if err == nil || !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.doc, err, c.want)
		}
	}
}
