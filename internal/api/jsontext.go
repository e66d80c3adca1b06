package api

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/service"
)

// CheckJSONText reports the first string of a JSON document (a request's
// body or a tool call's arguments) that does not hold valid Unicode text:
// raw bytes that are not UTF-8, or an escaped UTF-16 surrogate without its
// pair ("\udc80"). Go's decoder would silently turn either into U+FFFD, and
// the code would then fail as a puzzling SyntaxError, or a file would be
// written with other bytes than were sent. The error wraps
// service.ErrInvalidRequest and names the field ("code", "env.LANG",
// "allowed_imports[2]"). A document that is not JSON at all is left to the
// decoder to report.
func CheckJSONText(doc []byte) error {
	type level struct {
		object    bool
		key       string
		index     int
		expectKey bool
	}
	var stack []level
	where := func(isKey bool) string {
		var b strings.Builder
		for i, l := range stack {
			switch {
			case l.object && isKey && i == len(stack)-1:
			case l.object:
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(l.key)
			default:
				b.WriteString("[" + strconv.Itoa(l.index) + "]")
			}
		}
		switch {
		case isKey && b.Len() > 0:
			return "a field name in " + b.String()
		case isKey:
			return "a field name"
		case b.Len() == 0:
			return "the body"
		}
		return b.String()
	}
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '{':
			stack = append(stack, level{object: true, expectKey: true})
		case '[':
			stack = append(stack, level{})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].object {
					stack[n-1].expectKey = true
				} else {
					stack[n-1].index++
				}
			}
		case ':':
			if n := len(stack); n > 0 {
				stack[n-1].expectKey = false
			}
		case '"':
			isKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].expectKey
			end, text, problem := scanString(doc, i)
			if problem != "" {
				return fmt.Errorf("%w: %s %s", service.ErrInvalidRequest, where(isKey), problem)
			}
			if end < 0 {
				return nil // unterminated: the decoder says so
			}
			if isKey {
				stack[len(stack)-1].key = text
			}
			i = end
		}
	}
	return nil
}

// scanString reads the JSON string whose opening quote is at doc[start]. It
// returns the index of the closing quote (-1 when there is none), the
// string's text when it is short and plain (for field names), and what is
// wrong with it, if anything.
func scanString(doc []byte, start int) (end int, text, problem string) {
	var b strings.Builder
	plain := true
	pos := 0 // characters so far, for the message
	for i := start + 1; i < len(doc); pos++ {
		c := doc[i]
		switch {
		case c == '"':
			if plain {
				text = b.String()
			}
			return i, text, ""
		case c == '\\' && i+1 < len(doc):
			if doc[i+1] != 'u' {
				plain = false
				i += 2
				continue
			}
			r, ok := hex4(doc, i+2)
			if !ok {
				return -1, "", "" // malformed: the decoder says so
			}
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return i, "", fmt.Sprintf("is not valid Unicode: an unpaired UTF-16 surrogate \\u%04x at character %d", r, pos)
			case r >= 0xD800 && r <= 0xDBFF:
				low, ok := hex4(doc, i+8)
				if !ok || doc[i+6] != '\\' || doc[i+7] != 'u' || low < 0xDC00 || low > 0xDFFF {
					return i, "", fmt.Sprintf("is not valid Unicode: an unpaired UTF-16 surrogate \\u%04x at character %d", r, pos)
				}
				i += 12
			default:
				i += 6
			}
			plain = false
		case c < utf8.RuneSelf:
			if plain && b.Len() < 64 {
				b.WriteByte(c)
			} else {
				plain = false
			}
			i++
		default:
			r, size := utf8.DecodeRune(doc[i:])
			if r == utf8.RuneError && size <= 1 {
				return i, "", fmt.Sprintf("is not valid UTF-8 (byte 0x%02x at character %d); send text as UTF-8, and binary data as base64", c, pos)
			}
			if plain && b.Len() < 64 {
				b.Write(doc[i : i+size])
			} else {
				plain = false
			}
			i += size
		}
	}
	return -1, "", ""
}

// hex4 reads four hex digits at doc[i:].
func hex4(doc []byte, i int) (rune, bool) {
	if i+4 > len(doc) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(doc[i:i+4]), 16, 32)
	return rune(n), err == nil
}
