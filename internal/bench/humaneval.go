package bench

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Problem is one HumanEval task.
type Problem struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
	EntryPoint        string `json:"entry_point"`
}

// Program is the code that checks the canonical solution: the prompt, the
// solution, the tests and the call of check.
func (p Problem) Program() string {
	return p.Prompt + p.CanonicalSolution + "\n" + p.Test + "\n" + "check(" + p.EntryPoint + ")\n"
}

// LoadHumanEval reads a HumanEval JSONL file, gzipped or not.
func LoadHumanEval(path string) ([]Problem, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	var out []Problem
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var p Problem
		if err := json.Unmarshal([]byte(text), &p); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if p.TaskID == "" || p.EntryPoint == "" {
			return nil, fmt.Errorf("%s:%d: not a HumanEval problem (no task_id or entry_point)", path, line)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no problems", path)
	}
	return out, nil
}

// humanEvalRel is where the data set lies relative to the repository's
// root: beside it, in the shared data directory.
var humanEvalRel = filepath.Join("..", "shared", "data", "HumanEval.jsonl.gz")

// DefaultHumanEvalPath finds the HumanEval file: ../shared/data relative
// to the current directory, else relative to the codecage repository that
// holds the current directory or the executable. It returns "" when none
// exists.
func DefaultHumanEvalPath() string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		if p := filepath.Join(wd, humanEvalRel); exists(p) {
			return p
		}
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			if isRepoRoot(dir) {
				if p := filepath.Join(dir, humanEvalRel); exists(p) {
					return p
				}
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}

func isRepoRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && strings.Contains(string(b), "module github.com/codecage/codecage\n")
}

func exists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// HumanEval is the outcome of running the canonical solutions.
type HumanEval struct {
	Path string `json:"path"`
	// Total is how many problems ran (all of the file unless limited).
	Total  int `json:"total"`
	Passed int `json:"passed"`
	// InFile is how many problems the file holds.
	InFile int `json:"in_file"`
	// ProgramsPerSec is Total over the wall time.
	ProgramsPerSec float64 `json:"programs_per_sec"`
	// Failures lists the first failed problems.
	Failures []Failure `json:"failures"`
	// Skipped says why HumanEval did not run.
	Skipped string `json:"skipped,omitempty"`
}

// Failure is one failed HumanEval problem.
type Failure struct {
	TaskID  string `json:"task_id"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// maxFailures bounds the failures a report lists.
const maxFailures = 5
