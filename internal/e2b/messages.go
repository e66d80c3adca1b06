package e2b

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// The envd messages, in the Connect protocol's JSON form (the protobuf
// JSON mapping: lowerCamelCase names, enums by name, bytes in base64),
// written from E2B's public protocol description.

// entryInfo is filesystem.EntryInfo.
type entryInfo struct {
	Name          string            `json:"name"`
	Type          string            `json:"type"` // FILE_TYPE_FILE, FILE_TYPE_DIRECTORY, FILE_TYPE_SYMLINK
	Path          string            `json:"path"`
	Size          int64             `json:"size,string"`
	Mode          uint32            `json:"mode"`
	Permissions   string            `json:"permissions"`
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	ModifiedTime  time.Time         `json:"modifiedTime"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

type pathRequest struct {
	Path string `json:"path"`
}

type entryResponse struct {
	Entry *entryInfo `json:"entry"`
}

type listDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type listDirResponse struct {
	Entries []entryInfo `json:"entries"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type empty struct{}

// processConfig is process.ProcessConfig.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type startRequest struct {
	Process processConfig   `json:"process"`
	PTY     json.RawMessage `json:"pty,omitempty"`
	Tag     *string         `json:"tag,omitempty"`
	Stdin   *bool           `json:"stdin,omitempty"`
}

// selector is process.ProcessSelector: a pid or a tag.
type selector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type selectRequest struct {
	Process selector `json:"process"`
}

// ptyConfig is process.PTY: a terminal's size.
type ptyConfig struct {
	Size struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	} `json:"size"`
}

// inputRequest is process.SendInputRequest: bytes for a process's stdin
// or its terminal.
type inputRequest struct {
	Process selector `json:"process"`
	Input   struct {
		Stdin []byte `json:"stdin,omitempty"`
		PTY   []byte `json:"pty,omitempty"`
	} `json:"input"`
}

// updateRequest is process.UpdateRequest: a terminal's new size.
type updateRequest struct {
	Process selector   `json:"process"`
	PTY     *ptyConfig `json:"pty,omitempty"`
}

type signalRequest struct {
	Process selector `json:"process"`
	Signal  enum     `json:"signal"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfo `json:"processes"`
}

// processEvent is process.StartResponse / ConnectResponse: one event.
type processEvent struct {
	Event event `json:"event"`
}

type event struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *empty      `json:"keepalive,omitempty"`
}

type startEvent struct {
	PID uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

// enum reads a protobuf enum sent by name or by number.
type enum string

func (e *enum) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*e = enum(s)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("enum: %s is neither a name nor a number", service.Quote(string(b)))
	}
	*e = enum(strconv.Itoa(n))
	return nil
}

// jsonCodec is the Connect codec "json" over plain Go structs: the SDK
// speaks JSON, and these messages need no protobuf runtime.
type jsonCodec struct{}

func (jsonCodec) Name() string                  { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return nil // an empty message
	}
	// Text that is not valid Unicode is refused naming its field, as on
	// REST and MCP (the decoder would replace it with U+FFFD). The
	// message is checked as it arrives, inflated.
	if err := api.CheckJSONText(b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
