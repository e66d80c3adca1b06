package bench

import (
	"context"
	"fmt"

	"github.com/codecage/codecage/internal/dataset"
	"github.com/codecage/codecage/internal/service"
)

// Suite is the outcome of running a benchmark set's reference solutions
// (HumanEval, MBPP) under the service's default policy.
type Suite struct {
	// Path is the file the problems came from, or the embedded set's name.
	Path string `json:"path"`
	// Total is how many problems ran (all of the set unless limited).
	Total  int `json:"total"`
	Passed int `json:"passed"`
	// InFile is how many problems the set holds.
	InFile int `json:"in_file"`
	// ProgramsPerSec is Total over the wall time.
	ProgramsPerSec float64 `json:"programs_per_sec"`
	// Failures lists the first failed problems.
	Failures []Failure `json:"failures"`
	// Skipped says why the suite did not run.
	Skipped string `json:"skipped,omitempty"`
}

// Failure is one failed problem.
type Failure struct {
	TaskID  string `json:"task_id"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// maxFailures bounds the failures a report lists.
const maxFailures = 5

// loadSuite returns the tasks of a suite: the file at path when one is
// given, else the embedded set; limit > 0 keeps only the first ones.
func loadSuite(s *Suite, path, embeddedName string, embedded func() []dataset.Task, limit int) ([]dataset.Task, error) {
	tasks := []dataset.Task(nil)
	if path != "" {
		var err error
		if tasks, err = dataset.LoadHumanEval(path); err != nil {
			return nil, err
		}
		s.Path = path
	} else {
		tasks = embedded()
		s.Path = embeddedName
	}
	s.InFile = len(tasks)
	if limit > 0 && limit < len(tasks) {
		tasks = tasks[:limit]
	}
	return tasks, nil
}

// runSuite runs every task through svc from the bench's clients and
// fills s and a row; a task passes when its program exits 0.
func (b *bencher) runSuite(ctx context.Context, svc *service.Service, key, name string, tasks []dataset.Task, s *Suite) Row {
	failed := make([]*Failure, len(tasks))
	run := func(ctx context.Context, i int) string {
		task := tasks[i]
		res, err := svc.Execute(ctx, service.Request{Code: task.Program})
		msg := describe(res, err)
		if msg != "" {
			f := &Failure{TaskID: task.ID, Type: "Error", Message: msg}
			if err == nil && res.Error != nil {
				f.Type, f.Message = res.Error.Type, firstLine(res.Error.Message)
			}
			failed[i] = f
			return task.ID + ": " + msg
		}
		return ""
	}
	row := measure(ctx, key, name, len(tasks), b.clients, run)
	s.Total = row.Runs
	s.Passed = row.Runs - row.Errors
	s.ProgramsPerSec = row.Throughput
	s.Failures = []Failure{}
	for _, f := range failed {
		if f != nil && len(s.Failures) < maxFailures {
			s.Failures = append(s.Failures, *f)
		}
	}
	row.Notes = fmt.Sprintf("%d/%d passed", s.Passed, s.Total)
	return row
}
