package e2b_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// runOnTerminal runs line through envd's Start on a terminal of size
// (as the SDK's pty.create sends it) and returns what the terminal showed
// and the exit code; an error answer is returned as its text.
func runOnTerminal(t *testing.T, b *box, line string, size map[string]any) (string, int) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-c", line}}, "pty": map[string]any{"size": size}})
	raw := startProcess(t, b, msg)
	var shown strings.Builder
	exit := -1000
	for len(raw) >= 5 {
		n := int(raw[1])<<24 | int(raw[2])<<16 | int(raw[3])<<8 | int(raw[4])
		if len(raw) < 5+n {
			break
		}
		frame := raw[5 : 5+n]
		if raw[0]&2 != 0 { // the end of the stream: an error, if any
			shown.Write(frame)
		}
		var ev struct {
			Event struct {
				Data *struct{ PTY string } `json:"data"`
				End  *struct {
					ExitCode int `json:"exitCode"`
				} `json:"end"`
			} `json:"event"`
		}
		if raw[0] == 0 && json.Unmarshal(frame, &ev) == nil {
			if d := ev.Event.Data; d != nil {
				p, _ := base64.StdEncoding.DecodeString(d.PTY)
				shown.Write(p)
			}
			if ev.Event.End != nil {
				exit = ev.Event.End.ExitCode
			}
		}
		raw = raw[5+n:]
	}
	return shown.String(), exit
}

// pty.create with no size (a client whose own terminal reports none sends
// 0×0, which E2B's envd passes through) gets the usual 80×24, a side of 0
// alone the usual one of that side; a given size is kept. Was: refused
// ("columns and rows go from 1 to ...").
func TestTerminalWithoutASizeIs80x24(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{"timeout": 60}`)
	for _, c := range []struct {
		size map[string]any
		want string
	}{
		{map[string]any{}, "24 80"},
		{map[string]any{"cols": 0, "rows": 0}, "24 80"},
		{map[string]any{"cols": 120}, "24 120"},
		{map[string]any{"rows": 50}, "50 80"},
		{map[string]any{"cols": 100, "rows": 30}, "30 100"},
	} {
		shown, exit := runOnTerminal(t, b, "stty size", c.size)
		if exit != 0 || !strings.Contains(shown, c.want) {
			t.Errorf("size %v: exit %d, the terminal showed %q, want %q", c.size, exit, shown, c.want)
		}
	}
}
