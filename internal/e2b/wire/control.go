package wire

import (
	"encoding/json"
	"time"
)

// The control plane's JSON bodies (E2B's REST API).

// SandboxCreated is E2B's Sandbox: what create and connect answer.
type SandboxCreated struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// SandboxDetail is E2B's SandboxDetail and ListedSandbox.
type SandboxDetail struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	Domain          *string           `json:"domain"`
	Lifecycle       *Lifecycle        `json:"lifecycle,omitempty"`
	// Network is getInfo's (a listing has none): the rules in force,
	// allowInternetAccess false among them as a deny of all traffic.
	Network *NetworkInfo `json:"network,omitempty"`
}

// NetworkUpdate is E2B's SandboxNetworkUpdateConfig: it replaces the
// sandbox's egress rules, a field left out clearing its part.
type NetworkUpdate struct {
	AllowInternetAccess *bool    `json:"allow_internet_access"`
	AllowOut            []string `json:"allowOut"`
	DenyOut             []string `json:"denyOut"`
	// Refused when given, as on create.
	EgressProxy json.RawMessage `json:"egressProxy"`
	// Rules replace the sandbox's header transforms (absent: none).
	Rules json.RawMessage `json:"rules"`
}

// NetworkInfo is E2B's SandboxNetworkConfig as getInfo answers it.
type NetworkInfo struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic bool     `json:"allowPublicTraffic"`
	// Rules are the headers the proxy adds, by host; values not shown.
	Rules map[string][]NetworkRule `json:"rules,omitempty"`
}

// NetworkRule is E2B's SandboxNetworkRule; NetworkTransform its transform.
type NetworkRule struct {
	Transform *NetworkTransform `json:"transform,omitempty"`
}

// NetworkTransform is the headers a rule sets.
type NetworkTransform struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// Lifecycle is E2B's SandboxLifecycle: what the timeout does, and whether
// traffic wakes the sandbox when it is paused.
type Lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// TimeoutBody is the body of POST /sandboxes/{id}/timeout.
type TimeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

// ConnectBody is E2B's ConnectSandbox (v1: timeout required) and
// ConnectSandboxV2 (both optional); memory false asks a paused sandbox
// to come back by a cold boot from its filesystem.
type ConnectBody struct {
	Timeout *int64 `json:"timeout"`
	Memory  *bool  `json:"memory"`
}

// ExecuteBody is /execute's request.
type ExecuteBody struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// ContextBody is the body of POST /contexts: a context's language and directory.
type ContextBody struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContext is a context as E2B's code interpreter lists it.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// SandboxMetric is E2B's SandboxMetric.
type SandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// SnapshotInfo is E2B's SnapshotInfo. The id is the service's snapshot id,
// which create takes as a template.
type SnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// ForkResult is E2B's SandboxForkResult: one copy, or why it failed.
type ForkResult struct {
	Sandbox *SandboxCreated `json:"sandbox,omitempty"`
	Error   *ForkError      `json:"error,omitempty"`
}

// ForkError is one copy of a fork that failed.
type ForkError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// LogEntry is E2B's BuildLogEntry.
type LogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// BuildInfo is E2B's TemplateBuildInfo.
type BuildInfo struct {
	TemplateID string       `json:"templateID"`
	BuildID    string       `json:"buildID"`
	Status     string       `json:"status"`
	LogEntries []LogEntry   `json:"logEntries"`
	Logs       []string     `json:"logs"`
	Reason     *BuildReason `json:"reason,omitempty"`
}

// BuildReason is E2B's BuildStatusReason: why a build failed, at which step.
type BuildReason struct {
	Message    string     `json:"message"`
	Step       string     `json:"step,omitempty"`
	LogEntries []LogEntry `json:"logEntries"`
}

// TemplateInfo is E2B's Template.
type TemplateInfo struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int64      `json:"memoryMB"`
	DiskSizeMB    int64      `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
	BuildCount    int        `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
}

// SandboxLog is E2B's SandboxLog: a line of a sandbox's log (v1).
type SandboxLog struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// SandboxLogEntry is E2B's SandboxLogEntry: a structured entry. Fields
// is required: nil is written as {}.
type SandboxLogEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// MarshalJSON writes nil Fields as {}, as E2B's schema requires.
func (e SandboxLogEntry) MarshalJSON() ([]byte, error) {
	type plain SandboxLogEntry
	if e.Fields == nil {
		e.Fields = map[string]string{}
	}
	return json.Marshal(plain(e))
}

// SandboxLogs is E2B's SandboxLogs (GET /sandboxes/{id}/logs).
type SandboxLogs struct {
	Logs       []SandboxLog      `json:"logs"`
	LogEntries []SandboxLogEntry `json:"logEntries"`
}

// SandboxLogsV2 is E2B's SandboxLogsV2Response (GET /v2/sandboxes/{id}/logs).
type SandboxLogsV2 struct {
	Logs []SandboxLogEntry `json:"logs"`
}
