// Package check holds the shape checks of requests that the service's
// root and its domains share: code, a run's context fields, a session's
// request and lifetime, environment variables, a run's language. Each refuses with
// errdefs.ErrInvalidRequest. It is a leaf: it imports no domain.
package check

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Code refuses code over max bytes, or not UTF-8 (saying where).
func Code(code string, max int64) error {
	if int64(len(code)) > max {
		return fmt.Errorf("%w: code is %d bytes, the limit is %d (SANDBOX_MAX_CODE_SIZE)", errdefs.ErrInvalidRequest, len(code), max)
	}
	if !utf8.ValidString(code) {
		off := 0
		for off < len(code) {
			r, size := utf8.DecodeRuneInString(code[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return fmt.Errorf("%w: code is not valid UTF-8 (first bad byte at offset %d)", errdefs.ErrInvalidRequest, off)
	}
	return nil
}

// Run refuses contexts outside sessions (inSession false), and context
// names, directories and variables that are not what they should be.
func Run(inSession bool, context string, newContext bool, cwd string, env map[string]string) error {
	if !inSession && (context != "" || newContext || cwd != "") {
		return fmt.Errorf("%w: context, new_context and cwd are for a session's runs", errdefs.ErrInvalidRequest)
	}
	if len(context) > 64 || strings.ContainsFunc(context, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return fmt.Errorf("%w: context %s: at most 64 letters, digits, '-', '_' and '.'", errdefs.ErrInvalidRequest, bounded.Quote(context))
	}
	if len(cwd) > 4096 || strings.ContainsRune(cwd, 0) || !utf8.ValidString(cwd) {
		return fmt.Errorf("%w: cwd must be a path of UTF-8 text without NUL", errdefs.ErrInvalidRequest)
	}
	return Env(env)
}

// Language refuses a language no kernel runs, one the operator did not
// allow (kernels, SANDBOX_KERNELS), and a kernel outside a session or
// with tools (Python's alone).
func Language(language string, kernels []string, inSession, tools bool) error {
	lang, ok := fleet.NormalizeLanguage(language)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s (kernels: %s)", errdefs.ErrUnknownLanguage, bounded.Quote(language), strings.Join(fleet.Languages, ", "))
	case lang == fleet.LangPython:
		return nil
	case !slices.Contains(kernels, lang):
		return fmt.Errorf("%w: the %s kernel is not enabled here (SANDBOX_KERNELS)", errdefs.ErrInvalidRequest, lang)
	case !inSession:
		return fmt.Errorf("%w: the %s kernel runs in a session", errdefs.ErrInvalidRequest, lang)
	case tools:
		return fmt.Errorf("%w: tools are for Python code", errdefs.ErrInvalidRequest)
	}
	return nil
}

// Session refuses a session's home, environment, lifetime, template or
// labels that are not what they should be; a session lives at most
// maxLifetime (SANDBOX_SESSION_MAX_LIFETIME).
func Session(req session.Request, maxLifetime time.Duration) error {
	if err := fleet.CheckHome(req.Home); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInvalidRequest, strings.TrimPrefix(err.Error(), "jail: "))
	}
	if err := Env(req.Env); err != nil {
		return err
	}
	if err := Lifetime(req.Lifetime, time.Now(), maxLifetime); err != nil {
		return err
	}
	if len(req.Template) > 256 || !utf8.ValidString(req.Template) || strings.ContainsRune(req.Template, 0) {
		return fmt.Errorf("%w: template: at most 256 bytes of UTF-8 text without NUL", errdefs.ErrInvalidRequest)
	}
	if len(req.Labels) > 64 {
		return fmt.Errorf("%w: at most 64 labels", errdefs.ErrInvalidRequest)
	}
	for k, v := range req.Labels {
		if len(k) > 256 || len(v) > 4096 || !utf8.ValidString(k+v) || strings.ContainsRune(k+v, 0) {
			return fmt.Errorf("%w: label %s: names and values must be UTF-8 text without NUL, at most 256 and 4096 bytes", errdefs.ErrInvalidRequest, bounded.Quote(k))
		}
	}
	return nil
}

// Lifetime refuses a lifetime that would take a session created at
// created past maxLifetime (SANDBOX_SESSION_MAX_LIFETIME).
func Lifetime(d time.Duration, created time.Time, maxLifetime time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("%w: lifetime %s is negative", errdefs.ErrInvalidRequest, d)
	case d > 0 && time.Now().Add(d).After(created.Add(maxLifetime).Add(time.Second)):
		return fmt.Errorf("%w: a session lives at most %s from its start (SANDBOX_SESSION_MAX_LIFETIME); %s from now is past that",
			errdefs.ErrInvalidRequest, maxLifetime, d.Round(time.Second))
	}
	return nil
}

// Env refuses environment variables a caller may not set: bad
// names, loader and interpreter variables, values that are not text.
func Env(env map[string]string) error {
	if len(env) == 0 {
		return nil // every run's case: nothing to sort
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errdefs.ErrInvalidRequest}, args...)...)
	}
	if len(env) > 64 {
		return bad("at most 64 environment variables")
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case !envName.MatchString(k):
			return bad("environment variable name %s is not valid", bounded.Quote(k))
		case strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "PYTHON"):
			return bad("environment variable %s is not allowed (loader and interpreter variables, LD_* and PYTHON*, are refused)", bounded.Quote(k))
		case strings.ContainsRune(v, 0) || !utf8.ValidString(v) || len(v) > 32<<10:
			return bad("environment variable %s: the value must be UTF-8 text without NUL, at most 32 KiB", k)
		}
	}
	return nil
}

// LogQuery refuses a read of a session's log with an unknown level or a
// search longer than 1 KiB.
func LogQuery(q session.LogQuery) error {
	if q.MinLevel != "" && !session.ValidLevel(q.MinLevel) {
		return fmt.Errorf("%w: log level %s: want debug, info, warn or error", errdefs.ErrInvalidRequest, bounded.Quote(q.MinLevel))
	}
	if len(q.Search) > 1024 {
		return fmt.Errorf("%w: a log search is at most 1024 bytes, not %d", errdefs.ErrInvalidRequest, len(q.Search))
	}
	return nil
}
