package service

import (
	"encoding/json"
	"fmt"
)

// The peer protocol of the release before this one (v1) had no Args: a
// call carried its operation's arguments beside the envelope, execute's,
// command's and install's requests under a key of their own, the rest
// (path, data, lifetime, keep_memory...) as fields of the call, under the
// names their Args types use now. A replica of that release sends and
// reads only that shape, so in a rolling upgrade:
//   - this release reads both, and sends v1 to a replica until one of
//     its answers says it reads v2 (cluster.Node), so both ways answer;
//   - the next release sends only v2 (every replica it meets reads it)
//     but still reads v1, which this release sends first;
//   - the release after that deletes this file.

// v1Nested names the operations whose v1 call carried their request under
// a key of its own.
var v1Nested = map[string]string{opExecute: "execute", opCommand: "command", opInstall: "install"}

// UnmarshalJSON reads a call of either shape: one without args is v1.
func (call *PeerCall) UnmarshalJSON(b []byte) error {
	type plain PeerCall // its own methods left behind: no recursion
	if err := json.Unmarshal(b, (*plain)(call)); err != nil {
		return err
	}
	if call.Args != nil {
		return nil
	}
	key, nested := v1Nested[call.Op]
	if !nested {
		// The arguments are fields of the call: its args types read them
		// from the whole of it, and skip the envelope's.
		call.Args = append(json.RawMessage(nil), b...)
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	if req, ok := fields[key]; ok && string(req) != "null" {
		call.Args = req // else none: refused as an unknown operation
	}
	if call.SessionID == "" && call.Args != nil {
		// v1 named the session only in the request.
		var r struct{ SessionID string }
		if err := json.Unmarshal(call.Args, &r); err != nil {
			return fmt.Errorf("the %s request: %v", call.Op, err)
		}
		call.SessionID = r.SessionID
	}
	return nil
}

// V1JSON is call in the v1 shape, for a replica that may not read Args.
func (call PeerCall) V1JSON() ([]byte, error) {
	env := call
	env.Args = nil
	key, nested := v1Nested[call.Op]
	if nested {
		env.SessionID = "" // v1 named it only in the request
	}
	b, err := json.Marshal(env)
	if err != nil || len(call.Args) == 0 {
		return b, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	if nested {
		fields[key] = call.Args
	} else {
		var args map[string]json.RawMessage
		if err := json.Unmarshal(call.Args, &args); err != nil {
			return nil, fmt.Errorf("the arguments of peer operation %q are not an object: %v", call.Op, err)
		}
		for k, v := range args {
			fields[k] = v
		}
	}
	return json.Marshal(fields)
}
