package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
)

// Every command that takes the operator settings lists its own flags
// first in its help, then the settings under a heading: the 60-odd
// settings do not bury what the command itself takes (env build's
// --debian, run's --code).
func TestHelpShowsOwnFlagsFirst(t *testing.T) {
	settings := map[string]bool{"config": true}
	for _, s := range config.SettingKeys() {
		settings[strings.ReplaceAll(s[0], "_", "-")] = true
	}
	const heading = "Operator settings, shared by every command"
	for _, c := range []struct {
		args []string
		// first is the first flag the help lists ("" when the command
		// has none of its own); own are settings it lists as its own.
		first string
		own   []string
	}{
		{[]string{"run"}, "authorized-imports", nil},
		{[]string{"validate"}, "authorized-imports", nil},
		{[]string{"info"}, "json", nil},
		{[]string{"doctor"}, "", nil},
		{[]string{"serve"}, "e2b-listen", []string{"listen", "e2b-listen"}},
		{[]string{"mcp"}, "", nil},
		{[]string{"bench"}, "clients", nil},
		{[]string{"openapi"}, "", nil},
		{[]string{"env", "build"}, "base", nil},
		{[]string{"env", "list"}, "base", nil},
		{[]string{"env", "show"}, "base", nil},
		{[]string{"env", "rm"}, "base", nil},
		{[]string{"env", "gc"}, "base", nil},
		{[]string{"packages", "install"}, "json", nil},
		{[]string{"packages", "list"}, "json", nil},
		{[]string{"snapshots", "gc"}, "json", nil},
	} {
		name := strings.Join(c.args, " ")
		code, _, help := cli(t, "", append(c.args, "-h")...)
		if code != exitOK {
			t.Errorf("%s -h: exit %d\n%s", name, code, help)
			continue
		}
		var own, shared []string
		seenHeading := 0
		for _, line := range strings.Split(help, "\n") {
			if strings.HasPrefix(line, heading) {
				seenHeading++
				continue
			}
			flagName, ok := strings.CutPrefix(line, "  -")
			if !ok {
				continue
			}
			flagName, _, _ = strings.Cut(flagName, " ")
			if seenHeading == 0 {
				own = append(own, flagName)
			} else {
				shared = append(shared, flagName)
			}
		}
		// The first flag line is the command's own (or, for a command
		// with none, a setting under the heading).
		all := append(slices.Clone(own), shared...)
		if len(all) == 0 {
			t.Errorf("%s -h: no flags listed\n%s", name, help)
			continue
		}
		if c.first != "" && all[0] != c.first {
			t.Errorf("%s -h: the first flag listed is --%s, want its own --%s first", name, all[0], c.first)
			continue
		}
		if c.first == "" && len(own) > 0 {
			t.Errorf("%s -h: has no flags of its own, yet lists %v before the settings' heading", name, own)
			continue
		}
		if seenHeading != 1 {
			t.Errorf("%s -h: the settings' heading appears %d times\n%s", name, seenHeading, help)
			continue
		}
		for _, f := range own {
			if settings[f] && !slices.Contains(c.own, f) {
				t.Errorf("%s -h: the setting --%s is listed among the command's own flags", name, f)
			}
		}
		for _, f := range shared {
			if !settings[f] {
				t.Errorf("%s -h: its own flag --%s is listed among the settings", name, f)
			}
		}
		if len(shared)+len(c.own) != len(settings) {
			t.Errorf("%s -h: %d settings listed, want %d", name, len(shared)+len(c.own), len(settings))
		}
	}
}
