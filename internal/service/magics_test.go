package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// A cell's "!cmd" lines run as commands.run does, in the session's
// workspace and under its command policy: an allowed program's output
// comes back in the cell's, a program outside the list is refused with
// an exception naming it (the harness runs no program of its own).
func TestCellShellEscapesGoThroughTheCommandPolicy(t *testing.T) {
	svc := sessionService(t, func(c *config.Config) { c.AllowedCommands = []string{"echo", "cat", "sh"} })
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Home: "/home/user"})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(code string) *service.Result {
		t.Helper()
		res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "alice", Code: code, Display: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := exec("open('note.txt', 'w').write('from python')\n!echo shell says hi\n!cat note.txt\nx = 1")
	if !res.Success || !strings.Contains(res.Stdout, "shell says hi\n") || !strings.Contains(res.Stdout, "from python") {
		t.Fatalf("!echo / !cat: success %v stdout %q stderr %q error %+v", res.Success, res.Stdout, res.Stderr, res.Error)
	}
	res = exec("!wget http://example.com")
	if res.Success || res.Error == nil || res.Error.Type != "PermissionError" || !strings.Contains(res.Error.Message, `"wget" is not allowed`) {
		t.Fatalf("a program outside the list: %+v", res.Error)
	}
	res = exec("%%bash\necho from bash")
	if !res.Success || !strings.Contains(res.Stdout, "from bash") {
		t.Fatalf("%%%%bash: %q %+v", res.Stdout, res.Error)
	}
	res = exec("%nosuchmagic 1")
	if res.Error == nil || res.Error.Type != "UsageError" || res.Error.Message != "Line magic function `%nosuchmagic` not found." {
		t.Fatalf("unknown magic: %+v", res.Error)
	}
	// Outside a session there is no workspace to share: refused, clearly.
	one, err := svc.Execute(ctx, service.Request{Code: "!echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	if one.Error == nil || one.Error.Type != "PermissionError" || !strings.Contains(one.Error.Message, "only in a session") {
		t.Fatalf("!cmd outside a session: %+v", one.Error)
	}
}

// display() calls are results in order, before the cell's value; a
// figure shown is one with its PNG and chart; a DataFrame value has its
// data; a PIL image shown has its repr as text.
func TestCellDisplayOutputsInOrder(t *testing.T) {
	svc := sessionService(t, func(c *config.Config) { c.EnableDataScience = true })
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Home: "/home/user", Profiles: []string{"data_science"}})
	if err != nil {
		t.Fatal(err)
	}
	code := `
from IPython.display import display, HTML
import matplotlib.pyplot as plt
import pandas as pd
from PIL import Image
display(HTML("<b>first</b>"))
plt.plot([1, 2, 3], [4, 5, 6], label="up")
plt.title("T")
plt.show()
Image.new("RGB", (4, 4)).show()
display({"k": 1})
pd.DataFrame({"a": [1, 2]})
`
	res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "alice", Code: code, Display: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success {
		t.Fatalf("%+v %s", res.Error, res.Stderr)
	}
	if len(res.Outputs) != 4 || len(res.Images) != 0 {
		t.Fatalf("%d outputs, %d images", len(res.Outputs), len(res.Images))
	}
	o := res.Outputs
	if o[0].Data["text/html"] != "<b>first</b>" {
		t.Fatalf("first output %v", o[0].Data)
	}
	if o[1].Data["image/png"] == "" || !strings.HasPrefix(o[1].Data["text/plain"], "<Figure size") ||
		!strings.Contains(o[1].Data["e2b/chart"], `"type":"line","title":"T"`) || !strings.Contains(o[1].Data["e2b/chart"], `"label":"up","points":[[1.0,4.0],[2.0,5.0],[3.0,6.0]]`) {
		t.Fatalf("figure output %.400v", o[1].Data)
	}
	if !strings.HasPrefix(o[2].Data["text/plain"], "<PIL.Image.Image image mode=RGB size=4x4") || o[2].Data["image/png"] == "" {
		t.Fatalf("PIL output text %q", o[2].Data["text/plain"])
	}
	if o[3].Data["application/json"] != `{"k":1}` {
		t.Fatalf("dict output %v", o[3].Data)
	}
	if res.Display["e2b/data"] != `{"a":[1,2]}` || !strings.Contains(res.Display["text/html"], "<table") {
		t.Fatalf("DataFrame value %.300v", res.Display)
	}
}
