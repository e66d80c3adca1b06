package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/probe"
)

// Hostile tool arguments cost the caller an error, never the server:
// `"arguments": null` crashed the whole process in the SDK's defaults
// code (a write into a nil map, in a goroutine of its own). Every tool is
// called with each shape; each gets a JSON-RPC answer, and the server
// still answers afterwards.
func TestToolCallsWithHostileArguments(t *testing.T) {
	_, _, url := httpServers(t, true)
	hdr := map[string]string{"Mcp-Protocol-Version": "2025-06-18"}
	_, body := probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, hdr)
	var list struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(dataOf(body)), &list); err != nil || len(list.Result.Tools) == 0 {
		t.Fatalf("tools/list: %v %.300s", err, body)
	}
	for _, tool := range list.Result.Tools {
		for _, args := range []string{`,"arguments":null`, ``, `,"arguments":[]`, `,"arguments":5`, `,"arguments":"x"`, `,"arguments":{"session_id":null,"code":null,"path":null}`} {
			req := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool.Name + `"` + args + `}}`
			resp, body := probe.PostMCP(t, url+"/mcp", req, hdr)
			if got := idOf(t, body); got != "7" || !(strings.Contains(body, `"result"`) || strings.Contains(body, `"error"`)) {
				t.Errorf("%s with %q: %d %.300s", tool.Name, args, resp.StatusCode, body)
			}
		}
	}
	if _, body := probe.PostMCP(t, url+"/mcp", `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`, hdr); !strings.Contains(body, "execute_code") {
		t.Fatalf("the server does not answer after the hostile calls: %.300s", body)
	}
}

// dataOf is the JSON of the first message of an SSE or JSON answer.
func dataOf(body string) string {
	for _, line := range strings.Split(body, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			return data
		}
	}
	return body
}
