// Package wire holds the E2B protocol's messages as codecage reads and
// writes them: envd's Connect messages (envd.go) and the control plane's
// JSON bodies (control.go), written from E2B's public protocol
// description, and the codec Connect reads and writes them with
// (codec.go). The adapter's handlers (package e2b) translate them to and
// from service calls; nothing here calls the service.
package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/codecage/codecage/internal/bounded"
)

// envd's messages, in the Connect protocol's JSON form (the protobuf
// JSON mapping: lowerCamelCase names, enums by name, bytes in base64).

// EntryInfo is filesystem.EntryInfo.
type EntryInfo struct {
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

// PathRequest is filesystem.StatRequest, MakeDirRequest and RemoveRequest.
type PathRequest struct {
	Path string `json:"path"`
}

// EntryResponse is filesystem.StatResponse and MakeDirResponse.
type EntryResponse struct {
	Entry *EntryInfo `json:"entry"`
}

// ListDirRequest is filesystem.ListDirRequest.
type ListDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

// ListDirResponse is filesystem.ListDirResponse.
type ListDirResponse struct {
	Entries []EntryInfo `json:"entries"`
}

// MoveRequest is filesystem.MoveRequest.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// Empty is an empty message.
type Empty struct{}

// ProcessConfig is process.ProcessConfig.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// StartRequest is process.StartRequest.
type StartRequest struct {
	Process ProcessConfig   `json:"process"`
	PTY     json.RawMessage `json:"pty,omitempty"`
	Tag     *string         `json:"tag,omitempty"`
	Stdin   *bool           `json:"stdin,omitempty"`
}

// Selector is process.ProcessSelector: a pid or a tag.
type Selector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// SelectRequest is process.ConnectRequest and CloseStdinRequest: a process by pid or tag.
type SelectRequest struct {
	Process Selector `json:"process"`
}

// PTYConfig is process.PTY: a terminal's size.
type PTYConfig struct {
	Size struct {
		Cols uint32 `json:"cols"`
		Rows uint32 `json:"rows"`
	} `json:"size"`
}

// InputRequest is process.SendInputRequest: bytes for a process's stdin
// or its terminal.
type InputRequest struct {
	Process Selector `json:"process"`
	Input   struct {
		Stdin []byte `json:"stdin,omitempty"`
		PTY   []byte `json:"pty,omitempty"`
	} `json:"input"`
}

// UpdateRequest is process.UpdateRequest: a terminal's new size.
type UpdateRequest struct {
	Process Selector   `json:"process"`
	PTY     *PTYConfig `json:"pty,omitempty"`
}

// SignalRequest is process.SendSignalRequest.
type SignalRequest struct {
	Process Selector `json:"process"`
	Signal  Enum     `json:"signal"`
}

// ProcessInfo is process.ProcessInfo: a running process, as listed.
type ProcessInfo struct {
	Config ProcessConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

// ListResponse is process.ListResponse.
type ListResponse struct {
	Processes []ProcessInfo `json:"processes"`
}

// ProcessEvent is process.StartResponse / ConnectResponse: one event.
type ProcessEvent struct {
	Event Event `json:"event"`
}

// Event is process.ProcessEvent: one of start, data, end or keepalive.
type Event struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *Empty      `json:"keepalive,omitempty"`
}

// StartEvent is a process's start: its pid.
type StartEvent struct {
	PID uint32 `json:"pid"`
}

// DataEvent is a piece of a process's output.
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

// EndEvent is a process's end.
type EndEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

// enum reads a protobuf enum sent by name or by number.
type Enum string

func (e *Enum) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*e = Enum(s)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("enum: %s is neither a name nor a number", bounded.Quote(string(b)))
	}
	*e = Enum(strconv.Itoa(n))
	return nil
}

// WatchDirRequest is WatchDirRequest and CreateWatcherRequest. envd
// 0.6.3's includeEntry adds each event's entry; 0.6.4's
// allowNetworkMounts lifts envd's refusal to watch a network mount, and
// a codecage sandbox has none, so it changes nothing here.
type WatchDirRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

// FsEvent is filesystem.FilesystemEvent.
type FsEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *EntryInfo `json:"entry,omitempty"`
}

// WatchDirResponse is one event of a WatchDir stream.
type WatchDirResponse struct {
	Start      *Empty   `json:"start,omitempty"`
	Filesystem *FsEvent `json:"filesystem,omitempty"`
	Keepalive  *Empty   `json:"keepalive,omitempty"`
}

// WatcherRequest is filesystem.GetWatcherEventsRequest and RemoveWatcherRequest.
type WatcherRequest struct {
	WatcherID string `json:"watcherId"`
}

// WatcherEventsResponse is filesystem.GetWatcherEventsResponse.
type WatcherEventsResponse struct {
	Events []FsEvent `json:"events"`
}
