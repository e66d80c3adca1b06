package e2b

import (
	"encoding/json"

	"github.com/codecage/codecage/internal/api"
)

// envd's messages are package wire's; this is how Connect reads and
// writes them.

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
