package service

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// Kernels besides Python: a session's JavaScript, TypeScript and bash
// contexts run in kernel processes the harness starts beside the
// interpreter, in the same sandbox (runtime/kernels.py).

// checkLanguage refuses a language no kernel runs, one the operator did
// not allow (SANDBOX_KERNELS), and a kernel outside a session.
func (s *Service) checkLanguage(req Request) error {
	lang, ok := fleet.NormalizeLanguage(req.Language)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s (kernels: %s)", ErrUnknownLanguage, Quote(req.Language), strings.Join(fleet.Languages, ", "))
	case lang == fleet.LangPython:
		return nil
	case !slices.Contains(s.cfg.Kernels, lang):
		return fmt.Errorf("%w: the %s kernel is not enabled here (SANDBOX_KERNELS)", ErrInvalidRequest, lang)
	case req.SessionID == "":
		return fmt.Errorf("%w: the %s kernel runs in a session", ErrInvalidRequest, lang)
	case len(req.Tools) > 0:
		return fmt.Errorf("%w: tools are for Python code", ErrInvalidRequest)
	}
	return nil
}

// KernelEnabled reports whether the operator allows lang's kernel
// (Python's always runs).
func (s *Service) KernelEnabled(lang string) bool {
	l, ok := fleet.NormalizeLanguage(lang)
	return ok && (l == fleet.LangPython || slices.Contains(s.cfg.Kernels, l))
}

// kernelDeadline is when the harness stops a kernel that is still
// running, before the sandbox's own timeout would end the whole session
// (its Python state and other kernels with it).
func kernelDeadline(timeout time.Duration) time.Duration {
	return timeout - max(250*time.Millisecond, timeout/20)
}

// NormalizeLanguage names a language as E2B's code interpreter does ("js"
// is javascript, "ts" typescript, "" python); ok is false for one no
// kernel runs.
func NormalizeLanguage(lang string) (string, bool) { return fleet.NormalizeLanguage(lang) }

// KernelLanguages lists the kernels' languages, Python first.
func KernelLanguages() []string { return slices.Clone(fleet.Languages) }
