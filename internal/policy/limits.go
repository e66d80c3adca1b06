package policy

import (
	"fmt"
	"time"
)

// Bounds are the largest limits a request may ask for; the operator sets
// them, requests choose within them.
type Bounds struct {
	Timeout      time.Duration
	CPUTime      time.Duration
	MemoryBytes  int64
	OutputBytes  int64
	CodeBytes    int
	MinMemory    int64
	MaxProcesses int
}

// DefaultBounds are generous enough for data work and small enough that one
// request cannot take the host.
var DefaultBounds = Bounds{
	Timeout:      300 * time.Second,
	CPUTime:      300 * time.Second,
	MemoryBytes:  4 << 30,
	OutputBytes:  16 << 20,
	CodeBytes:    4 << 20,
	MinMemory:    16 << 20,
	MaxProcesses: 1024,
}

// LimitError is a request limit outside the operator's bounds.
type LimitError struct {
	Name  string
	Value string
	Range string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s %s is out of range (allowed: %s)", e.Name, e.Value, e.Range)
}

// CheckDuration rejects a negative duration or one above max.
func CheckDuration(name string, v, max time.Duration) error {
	if v < 0 || v > max {
		return &LimitError{name, v.String(), "0 < " + name + " <= " + max.String()}
	}
	return nil
}

// CheckBytes rejects a size outside [min, max]; zero means "default".
func CheckBytes(name string, v, min, max int64) error {
	if v == 0 {
		return nil
	}
	if v < min || v > max {
		return &LimitError{name, fmt.Sprintf("%d bytes", v), fmt.Sprintf("%d to %d bytes", min, max)}
	}
	return nil
}
