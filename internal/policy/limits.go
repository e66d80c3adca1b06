package policy

import (
	"fmt"
	"time"
)

// LimitError is a request limit outside the operator's bounds.
type LimitError struct {
	Name  string
	Value string
	Range string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s %s is out of range (allowed: %s)", e.Name, e.Value, e.Range)
}

// CheckDuration rejects a negative duration or one above max; zero means
// "the default".
func CheckDuration(name string, v, max time.Duration) error {
	if v < 0 || v > max {
		return &LimitError{name, v.String(), "0 < " + name + " <= " + max.String()}
	}
	return nil
}

// CheckBytes rejects a size outside [min, max]; zero means "the default".
func CheckBytes(name string, v, min, max int64) error {
	if v == 0 {
		return nil
	}
	if v < min || v > max {
		return &LimitError{name, fmt.Sprintf("%d bytes", v), fmt.Sprintf("%d to %d bytes", min, max)}
	}
	return nil
}
