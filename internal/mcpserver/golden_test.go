package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// volatile matches values that differ on every run or host; the golden
// files keep their keys with a placeholder.
var volatile = regexp.MustCompile(`"(execution_id|execution_time|peak_memory_bytes|cpu_time_seconds|idle_cpu_seconds|session_id|created_at|last_used|expires_at|modified|cgroup|landlock_abi|rootless|seccomp)": ("[^"]*"|[0-9.e+-]+|true|false)`)

func normalize(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return volatile.ReplaceAllString(string(b), `"$1": "…"`) + "\n"
}

// txtar reads and writes the go-sdk's txtar-style golden files: sections
// introduced by "-- name --" lines.
func readTxtar(path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	var name string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(line, "-- ") && strings.HasSuffix(strings.TrimSpace(line), " --") {
			name = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "-- "), " --")
			continue
		}
		if name != "" {
			out[name] += line
		}
	}
	return out
}

func writeTxtar(path, comment string, files map[string]string) error {
	var b bytes.Buffer
	b.WriteString(comment)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "-- %s --\n%s", n, files[n])
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// TestGoldenTranscripts pins the tool list (names, descriptions, schemas)
// and typical calls. Run with -update after an intended change.
func TestGoldenTranscripts(t *testing.T) {
	cs := connect(t)
	ctx := context.Background()
	got := map[string]string{}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(tools.Tools, func(i, j int) bool { return tools.Tools[i].Name < tools.Tools[j].Name })
	got["tools.json"] = normalize(tools.Tools)
	calls := []struct {
		file string
		name string
		args map[string]any
	}{
		{"execute_print.json", "execute_code", map[string]any{"code": "print(6*7)"}},
		{"execute_result.json", "execute_code", map[string]any{"code": "x = [1, 2]\nx + [3]"}},
		{"execute_error.json", "execute_code", map[string]any{"code": "def f():\n    return 1/0\nf()"}},
		{"execute_import_refused.json", "execute_code", map[string]any{"code": "import os"}},
		{"validate_seed_example.json", "validate_code", map[string]any{"code": "import os\nos.system('rm -rf /')"}},
		{"command_pipeline.json", "run_command", map[string]any{"command": "printf 'b\\na\\n' | sort | head -1"}},
		{"command_refused.json", "run_command", map[string]any{"command": "curl -s http://example.com"}},
	}
	for _, c := range calls {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.name, Arguments: c.args})
		if err != nil {
			t.Fatal(err)
		}
		got[c.file] = normalize(res)
	}
	path := filepath.Join("testdata", "transcripts.txtar")
	if *update {
		comment := "Golden MCP transcripts: the tool list and typical calls.\nRegenerate with: go test ./internal/mcpserver -run TestGoldenTranscripts -update\n"
		if err := writeTxtar(path, comment, got); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := readTxtar(path)
	if want == nil {
		t.Fatalf("no %s: run with -update", path)
	}
	for name, g := range got {
		if want[name] != g {
			t.Errorf("%s differs from the golden file (run with -update if intended):\n--- got ---\n%s--- want ---\n%s", name, g, want[name])
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("golden %s is no longer produced", name)
		}
	}
}
