package cli

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/audit"
	"github.com/codecage/codecage/internal/bench"
	"github.com/codecage/codecage/internal/runtime"
	"github.com/codecage/codecage/internal/service"
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonFieldNames lists the JSON name of every field reachable from t, with
// where it is, as encoding/json would name it.
func jsonFieldNames(t reflect.Type, where string, seen map[reflect.Type]bool, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] || t == reflect.TypeFor[time.Time]() {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			jsonFieldNames(f.Type, where, seen, out) // its fields are promoted
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		*out = append(*out, where+"."+name)
		jsonFieldNames(f.Type, where+"."+name, seen, out)
	}
}

// What the command line prints with --json (run, info, validate, audit,
// bench, packages, sessions, snapshots) is snake_case like the other
// surfaces.
func TestCLIJSONIsSnakeCase(t *testing.T) {
	types := map[string]reflect.Type{
		"run":            reflect.TypeFor[service.Result](),
		"info":           reflect.TypeFor[service.Info](),
		"validate":       reflect.TypeFor[runtime.Validation](),
		"audit list":     reflect.TypeFor[audit.Event](),
		"audit stats":    reflect.TypeFor[audit.Stats](),
		"bench":          reflect.TypeFor[bench.Report](),
		"packages list":  reflect.TypeFor[service.InstalledPackage](),
		"packages add":   reflect.TypeFor[service.InstallResult](),
		"session":        reflect.TypeFor[service.SessionInfo](),
		"command":        reflect.TypeFor[service.CommandResult](),
		"code tools":     reflect.TypeFor[service.CodeTool](),
		"code servers":   reflect.TypeFor[service.CodeServer](),
		"workspace file": reflect.TypeFor[service.FileInfo](),
		"snapshot":       reflect.TypeFor[service.SnapshotInfo](),
		"fork":           reflect.TypeFor[service.ForkResult](),
	}
	// The walk sees untagged, embedded and nested fields.
	type inner struct{ Connected bool }
	type probe struct {
		inner
		List []struct {
			OK   bool `json:"ok"`
			Name string
		} `json:"list"`
	}
	var got []string
	jsonFieldNames(reflect.TypeFor[*probe](), "p", map[reflect.Type]bool{}, &got)
	if strings.Join(got, " ") != "p.Connected p.list p.list.ok p.list.Name" {
		t.Fatalf("walker: %v", got)
	}
	for cmd, typ := range types {
		var names []string
		jsonFieldNames(typ, cmd, map[reflect.Type]bool{}, &names)
		if len(names) == 0 {
			t.Errorf("%s: no fields found", cmd)
		}
		for _, n := range names {
			if last := n[strings.LastIndexByte(n, '.')+1:]; !snakeCase.MatchString(last) {
				t.Errorf("not snake_case: %s", n)
			}
		}
	}
}
