package dataset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbeddedSets(t *testing.T) {
	for _, c := range []struct {
		name   string
		tasks  []Task
		n      int
		prefix string
	}{
		{"HumanEval", HumanEval(), 164, "HumanEval/"},
		{"MBPP", MBPP(), 974, "MBPP/"},
	} {
		if len(c.tasks) != c.n {
			t.Errorf("%s: %d tasks, want %d", c.name, len(c.tasks), c.n)
		}
		seen := map[string]bool{}
		for _, task := range c.tasks {
			if !strings.HasPrefix(task.ID, c.prefix) || seen[task.ID] {
				t.Errorf("%s: id %q (duplicate: %v)", c.name, task.ID, seen[task.ID])
			}
			seen[task.ID] = true
			if !strings.HasSuffix(task.Program, "\n") || len(task.Program) < 20 {
				t.Errorf("%s: program of %s: %q", c.name, task.ID, task.Program)
			}
		}
	}
}

func TestProgramShapes(t *testing.T) {
	he := HumanEval()[0]
	if !strings.HasPrefix(he.Program, "from typing import List\n") || !strings.HasSuffix(he.Program, "\ncheck(has_close_elements)\n") {
		t.Fatalf("HumanEval/0:\n%s", he.Program)
	}
	mb := MBPP()[0]
	if mb.ID != "MBPP/1" || !strings.Contains(mb.Program, "def min_cost(cost, m, n)") ||
		!strings.HasSuffix(mb.Program, "assert min_cost([[3, 4, 5], [6, 10, 4], [3, 7, 5]], 2, 2) == 16\n") {
		t.Fatalf("MBPP/1:\n%s", mb.Program)
	}
}

func TestLoadHumanEvalFile(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "he.jsonl")
	line := `{"task_id": "t/0", "prompt": "def f(x):\n", "canonical_solution": "    return x\n", "test": "def check(c):\n    assert c(1) == 1\n", "entry_point": "f"}`
	if err := os.WriteFile(plain, []byte("\n"+line+"\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tasks, err := LoadHumanEval(plain)
	if err != nil || len(tasks) != 1 || tasks[0].ID != "t/0" || !strings.HasSuffix(tasks[0].Program, "check(f)\n") {
		t.Fatalf("tasks %+v, err %v", tasks, err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"task_id": "x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHumanEval(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl:1: not a HumanEval problem") {
		t.Fatalf("err = %v", err)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHumanEval(empty); err == nil || !strings.Contains(err.Error(), "no problems") {
		t.Fatalf("err = %v", err)
	}
	if _, err := LoadHumanEval(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Fatalf("err = %v", err)
	}
}
