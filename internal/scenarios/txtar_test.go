package scenarios_test

import (
	"bytes"
	"fmt"
	"strings"
)

// archive is a txtar file: prose, then sections introduced by
// "-- name --" lines (golang.org/x/tools/txtar's format; it is not a
// dependency, and this much is enough).
type archive struct {
	comment string
	names   []string // in file order
	files   map[string]string
}

func parseArchive(b []byte) archive {
	a := archive{files: map[string]string{}}
	name := ""
	for _, line := range strings.SplitAfter(string(b), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			name = strings.TrimSpace(t[3 : len(t)-3])
			a.names = append(a.names, name)
			continue
		}
		if name == "" {
			a.comment += line
		} else {
			a.files[name] += line
		}
	}
	return a
}

func (a archive) format() []byte {
	var b bytes.Buffer
	b.WriteString(a.comment)
	for _, n := range a.names {
		fmt.Fprintf(&b, "-- %s --\n%s", n, a.files[n])
	}
	return b.Bytes()
}

// set replaces section name, adding it at the end when it is new.
func (a *archive) set(name, text string) {
	if _, ok := a.files[name]; !ok {
		a.names = append(a.names, name)
	}
	a.files[name] = text
}

// surfaces are the surfaces the scenario is played on: those its
// -- surfaces -- section names, else all.
func (a archive) surfaces() []string {
	list, ok := a.files["surfaces"]
	if !ok {
		return surfaces
	}
	return strings.Fields(list)
}
