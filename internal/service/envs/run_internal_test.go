package envs

import (
	"slices"
	"testing"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/policy"
)

// An environment's modules join a run's import policy (not one whose
// policy is off), and records of one content that start differently
// have classes of their own.
func TestEnvironmentPolicyAndVariant(t *testing.T) {
	e := envstore.Env{ID: "sha256:1", Modules: []string{"polars", "json"}}
	p := WithModules(policy.ImportPolicy{Modules: []string{"json", "math"}}, e)
	if !slices.Equal(p.Modules, []string{"json", "math", "polars"}) {
		t.Fatalf("modules %v", p.Modules)
	}
	if off := WithModules(policy.ImportPolicy{}, e); off.Modules != nil {
		t.Fatalf("a policy that is off got modules %v", off.Modules)
	}
	f := e
	f.Vars = map[string]string{"A": "1"}
	if variant(e) == variant(f) {
		t.Fatal("records with other variables share a class")
	}
	if variant(e) != variant(envstore.Env{ID: "sha256:1", Name: "other", Modules: e.Modules}) {
		t.Fatal("two names of one record got classes of their own")
	}
}
