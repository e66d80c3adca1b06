package wire

import (
	"encoding/json"

	"github.com/codecage/codecage/internal/api"
)

// Codec is the Connect codec "json" over these plain Go structs: the SDK
// speaks JSON, and the messages need no protobuf runtime.
type Codec struct{}

// Name implements connect.Codec.
func (Codec) Name() string { return "json" }

// Marshal implements connect.Codec.
func (Codec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal implements connect.Codec.
func (Codec) Unmarshal(b []byte, v any) error {
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
