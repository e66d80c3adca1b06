package runtime

import (
	"regexp"
	"testing"
)

// The zygote, cell.py and the harness run as one Python source: a
// function one of them defines twice replaces the other's silently (a
// cell.py _cell once replaced the zygote's, and every zygote cell died).
func TestPrependedSourcesDefineEachNameOnce(t *testing.T) {
	defs := regexp.MustCompile(`(?m)^(?:def|class) (\w+)`)
	seen := map[string]string{}
	for _, f := range []struct{ name, src string }{{"zygote.py", zygoteSource}, {"cell.py", cellSource}, {"harness.py", harnessFile}, {"validator.py", validatorFile}} {
		for _, m := range defs.FindAllStringSubmatch(f.src, -1) {
			if other, ok := seen[m[1]]; ok && !(other == "zygote.py" && f.name == "validator.py") && !(other == "harness.py" && f.name == "validator.py") {
				t.Errorf("%s defines %s, which %s defines too", f.name, m[1], other)
			}
			if _, ok := seen[m[1]]; !ok {
				seen[m[1]] = f.name
			}
		}
	}
}
