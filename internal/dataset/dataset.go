// Package dataset holds the benchmark programs codecage is measured and
// tested against: OpenAI's HumanEval and Google Research's MBPP, real code
// of the kind LLMs write. Both are compiled into the binary, so codecage
// bench and the tests need no file beside the repository. It knows nothing
// of sandboxes: it only turns the data sets into programs.
package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

//go:embed HumanEval.jsonl.gz
var humanEvalGz []byte

//go:embed mbpp.jsonl.gz
var mbppGz []byte

// Task is one benchmark problem as a program that exits 0 when the
// reference solution passes its tests.
type Task struct {
	// ID is the data set's own id ("HumanEval/0", "MBPP/1").
	ID      string
	Program string
}

// HumanEvalName and MBPPName name the embedded data sets in reports.
const (
	HumanEvalName = "HumanEval (embedded)"
	MBPPName      = "MBPP (embedded)"
)

// HumanEval returns the 164 HumanEval problems compiled into the binary.
func HumanEval() []Task {
	tasks, err := ReadHumanEval(bytes.NewReader(humanEvalGz), "HumanEval.jsonl.gz")
	if err != nil {
		panic(err) // the embedded file is checked by the tests
	}
	return tasks
}

// MBPP returns the 974 MBPP problems compiled into the binary.
func MBPP() []Task {
	tasks, err := ReadMBPP(bytes.NewReader(mbppGz), "mbpp.jsonl.gz")
	if err != nil {
		panic(err)
	}
	return tasks
}

// LoadHumanEval reads a HumanEval JSONL file, gzipped or not.
func LoadHumanEval(path string) ([]Task, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadHumanEval(f, path)
}

// humanEvalRecord is one line of HumanEval.
type humanEvalRecord struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
	EntryPoint        string `json:"entry_point"`
}

// ReadHumanEval reads HumanEval JSONL (gzipped or not) from r; name is
// used in errors. A program is the prompt, the canonical solution, the
// tests and the call of check.
func ReadHumanEval(r io.Reader, name string) ([]Task, error) {
	return readJSONL(r, name, func(line []byte) (Task, error) {
		var p humanEvalRecord
		if err := json.Unmarshal(line, &p); err != nil {
			return Task{}, err
		}
		if p.TaskID == "" || p.EntryPoint == "" {
			return Task{}, fmt.Errorf("not a HumanEval problem (no task_id or entry_point)")
		}
		return Task{ID: p.TaskID, Program: p.Prompt + p.CanonicalSolution + "\n" + p.Test + "\n" + "check(" + p.EntryPoint + ")\n"}, nil
	})
}

// mbppRecord is one line of MBPP.
type mbppRecord struct {
	TaskID        *int     `json:"task_id"`
	Code          string   `json:"code"`
	TestSetupCode string   `json:"test_setup_code"`
	TestList      []string `json:"test_list"`
}

// ReadMBPP reads MBPP JSONL (gzipped or not) from r. A program is the
// reference code, the test setup and the test assertions, one per line.
func ReadMBPP(r io.Reader, name string) ([]Task, error) {
	return readJSONL(r, name, func(line []byte) (Task, error) {
		var p mbppRecord
		if err := json.Unmarshal(line, &p); err != nil {
			return Task{}, err
		}
		if p.TaskID == nil || p.Code == "" || len(p.TestList) == 0 {
			return Task{}, fmt.Errorf("not an MBPP problem (no task_id, code or test_list)")
		}
		prog := p.Code + "\n" + p.TestSetupCode + "\n" + strings.Join(p.TestList, "\n") + "\n"
		return Task{ID: "MBPP/" + strconv.Itoa(*p.TaskID), Program: prog}, nil
	})
}

// readJSONL decodes one record per non-empty line of r, gunzipping it
// first when it starts with gzip's magic number.
func readJSONL(r io.Reader, name string, decode func([]byte) (Task, error)) ([]Task, error) {
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		in = zr
	}
	var out []Task
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		t, err := decode(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no problems", name)
	}
	return out, nil
}
