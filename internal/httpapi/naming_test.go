package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/httpapi"
)

// snakeCase is the one way a JSON field is named on every surface.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// badFieldNames walks a JSON Schema or OpenAPI document and lists each
// property name that is not snake_case, with where it was found.
func badFieldNames(doc any, where string) []string {
	var out []string
	switch v := doc.(type) {
	case map[string]any:
		if props, ok := v["properties"].(map[string]any); ok {
			for name := range props {
				if !snakeCase.MatchString(name) {
					out = append(out, fmt.Sprintf("%s: %q", where, name))
				}
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, badFieldNames(v[k], where+"/"+k)...)
		}
	case []any:
		for i, e := range v {
			out = append(out, badFieldNames(e, fmt.Sprintf("%s/%d", where, i))...)
		}
	}
	return out
}

func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every field of every REST body (the OpenAPI document) and of every MCP
// tool's input and output (the schemas a real client lists) is snake_case.
func TestEveryFieldIsSnakeCase(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.EnableDataScience, cfg.EnableNetwork, cfg.EnableFilesystem, cfg.EnableContainerMode = true, true, true, true
	bad := badFieldNames(asJSON(t, httpapi.Document(cfg, true)), "openapi")

	ts := startServer(t, "", nil)
	client := mcp.NewClient(&mcp.Implementation{Name: "naming-test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) < 14 {
		t.Fatalf("only %d tools listed", len(tools.Tools))
	}
	for _, tool := range tools.Tools {
		if tool.OutputSchema == nil {
			t.Errorf("%s has no output schema", tool.Name)
		}
		bad = append(bad, badFieldNames(asJSON(t, tool.InputSchema), tool.Name+" input")...)
		bad = append(bad, badFieldNames(asJSON(t, tool.OutputSchema), tool.Name+" output")...)
	}
	for _, b := range bad {
		t.Errorf("not snake_case: %s", b)
	}
	// The walk finds what it looks for.
	if got := badFieldNames(map[string]any{"properties": map[string]any{"Connected": true, "ok_name": true}}, "x"); len(got) != 1 {
		t.Fatalf("walker: %v", got)
	}
}
