package config

import (
	"fmt"
	"strconv"
	"strings"
)

// The configuration reference of docs/configuration.md is made from the
// settings table, so that the page and the table cannot drift apart:
// `go generate ./internal/config` (gendocs.go) rewrites the part of the page
// between these markers, and TestConfigurationPageIsCurrent fails when the
// committed page differs from what it would write.
const (
	ReferenceBegin = "<!-- Generated from internal/config/settings.go by `go generate ./internal/config`: edit the table there, not here. -->"
	ReferenceEnd   = "<!-- End of the generated reference. -->"
)

// referenceGroups cut the table, in its order, into the page's sections:
// each starts at the setting named.
var referenceGroups = []struct{ title, first string }{
	{"Limits of a run", "SANDBOX_TIMEOUT"},
	{"Profiles, imports and backends", "SANDBOX_ENABLE_DATA_SCIENCE"},
	{"Warm pools and the sandbox budget", "SANDBOX_POOL_SIZE"},
	{"Sessions and directory watches", "SANDBOX_MAX_SESSIONS"},
	{"Admission", "SANDBOX_RATE_LIMIT"},
	{"Listeners and HTTP", "SANDBOX_LISTEN"},
	{"Audit log", "SANDBOX_AUDIT_DB"},
	{"Cluster", "SANDBOX_REPLICA_URL"},
	{"Snapshots and parking", "SANDBOX_SNAPSHOT_STORE"},
	{"Logs", "SANDBOX_LOG_FORMAT"},
	{"Kernels and shell commands", "SANDBOX_KERNELS"},
	{"Packages (pip_install)", "SANDBOX_BLOCKED_PACKAGES"},
	{"Code mode", "SANDBOX_TOOLS_CONFIG"},
	{"The operator's packages and environments", "SANDBOX_PACKAGES_DIR"},
	{"Interpreter", "SANDBOX_PYTHON"},
}

// ReferenceMarkdown is the reference section of docs/configuration.md:
// per group, a table of its settings with their flag, default and meaning.
func ReferenceMarkdown() (string, error) {
	if len(referenceGroups) == 0 || settings[0].Env != referenceGroups[0].first {
		return "", fmt.Errorf("the first reference group must start at %s", settings[0].Env)
	}
	defaults := DefaultConfig()
	var b strings.Builder
	g := 0
	for _, s := range settings {
		if g < len(referenceGroups) && s.Env == referenceGroups[g].first {
			fmt.Fprintf(&b, "\n### %s\n\n| variable | flag | default | meaning |\n|---|---|---|---|\n", referenceGroups[g].title)
			g++
		}
		meaning := s.Doc
		if meaning == "" {
			meaning = s.Usage
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s |\n", s.Env, strings.ReplaceAll(s.Key, "_", "-"),
			cell(shownDefault(s, &defaults)), cell(meaning))
	}
	if g != len(referenceGroups) {
		return "", fmt.Errorf("reference group %q starts at %s, which is not in the table where the groups before it end",
			referenceGroups[g].title, referenceGroups[g].first)
	}
	return strings.TrimPrefix(b.String(), "\n"), nil
}

// UpdateReference returns page with its reference section (between
// ReferenceBegin and ReferenceEnd) made anew.
func UpdateReference(page string) (string, error) {
	begin := strings.Index(page, ReferenceBegin)
	end := strings.Index(page, ReferenceEnd)
	if begin < 0 || end < begin {
		return "", fmt.Errorf("the page lacks the markers %q and %q, in that order", ReferenceBegin, ReferenceEnd)
	}
	ref, err := ReferenceMarkdown()
	if err != nil {
		return "", err
	}
	return page[:begin+len(ReferenceBegin)] + "\n\n" + ref + "\n" + page[end:], nil
}

// shownDefault words a setting's default for the page: its own wording,
// else DefaultConfig's value in the unit an operator would write it in.
func shownDefault(s setting, defaults *Config) string {
	if s.Default != "" {
		return s.Default
	}
	v := s.get(defaults)
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case v == "":
		return "none"
	case s.kind == kindSize && err == nil:
		v = withUnit(n, []unit{{1 << 40, "t"}, {1 << 30, "g"}, {1 << 20, "m"}, {1 << 10, "k"}})
	case s.kind == kindLongDuration && err == nil:
		v = withUnit(n, []unit{{24 * 3600, "d"}, {3600, "h"}, {60, "m"}})
	}
	return "`" + v + "`"
}

type unit struct {
	size int64
	name string
}

// withUnit writes n in the largest unit that divides it (ParseSize and
// parseLongDuration read it back).
func withUnit(n int64, units []unit) string {
	for _, u := range units {
		if n > 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// cell escapes what would end a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
