package service

import (
	"slices"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// Kernels besides Python: a session's JavaScript, TypeScript and bash
// contexts run in kernel processes the harness starts beside the
// interpreter, in the same sandbox (runtime/kernels.py).

// KernelEnabled reports whether the operator allows lang's kernel
// (Python's always runs).
func (s *Service) KernelEnabled(lang string) bool {
	l, ok := fleet.NormalizeLanguage(lang)
	return ok && (l == fleet.LangPython || slices.Contains(s.cfg.Kernels, l))
}

// kernelSlack is how long past a kernel run's time limit the sandbox's own
// timeout waits: the harness stops the kernel at the limit, and only a
// harness that cannot (starved on a loaded host, its CPU quota spent by
// the looping kernel) ends the whole session, its Python state and other
// kernels with it.
func kernelSlack(timeout time.Duration) time.Duration {
	return max(5*time.Second, timeout/10)
}

// NormalizeLanguage names a language as E2B's code interpreter does ("js"
// is javascript, "ts" typescript, "" python); ok is false for one no
// kernel runs.
func NormalizeLanguage(lang string) (string, bool) { return fleet.NormalizeLanguage(lang) }

// KernelLanguages lists the kernels' languages, Python first.
func KernelLanguages() []string { return slices.Clone(fleet.Languages) }
