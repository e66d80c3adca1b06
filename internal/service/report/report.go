// Package report holds what a run reports: an execution's result and how
// a run's outcome becomes it (result.go), and the parts of a result that
// every domain of the service which runs something shares: what the run
// used, the sink its output streams through (sink.go), and what that
// stream left out. It is a leaf, so that a domain's result (a
// command's, an execution's) can carry them without importing another.
package report

// Resources is what the run used.
type Resources struct {
	PeakMemoryBytes int64   `json:"peak_memory_bytes"`
	CPUTimeSeconds  float64 `json:"cpu_time_seconds"`
	// IdleCPUSeconds is, in a session, the CPU time its sandbox spent
	// since its previous request ended (what the code left running).
	IdleCPUSeconds float64 `json:"idle_cpu_seconds"`
}

// OutputDropped counts the output lines a run's stream left out because
// its client read too slowly; the result's stdout and stderr still hold
// them.
type OutputDropped struct {
	Lines int64 `json:"lines" doc:"Lines not streamed."`
	Bytes int64 `json:"bytes" doc:"Their size in bytes."`
}
