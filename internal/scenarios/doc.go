// Package scenarios holds one test: the golden scenarios of
// testdata/scenarios/*.txtar, each run against every surface (REST, MCP,
// E2B) of one real service, so that a behaviour one surface adds or
// drops shows up as a diff beside the other two. The package has no code
// of its own; see scenarios_test.go for the file format.
package scenarios
