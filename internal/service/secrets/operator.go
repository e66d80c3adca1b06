package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/codecage/codecage/internal/egress"
)

// The operator's egress credentials (SANDBOX_EGRESS_CREDENTIALS): bindings
// every sandbox with the network profile gets, their values read at start
// from the server's environment or a file, kept in this process alone.

// operatorEntry is one of the file's credentials: a binding without a
// secret's name, and where its value is.
type operatorEntry struct {
	egress.Binding
	ValueEnv  string `json:"value_env"`
	ValueFile string `json:"value_file"`
}

// OperatorPrefix marks an operator's binding's secret.
const OperatorPrefix = "operator:"

// Operator is the operator's credentials, loaded.
type Operator struct {
	Bindings []egress.Binding
	values   map[string]string
}

// LoadOperator reads the operator's credentials file (""; none). Every
// fault is named by its entry, never quoting a value.
func LoadOperator(path string) (*Operator, error) {
	op := &Operator{values: map[string]string{}}
	if path == "" {
		return op, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("SANDBOX_EGRESS_CREDENTIALS: %w", err)
	}
	var file struct {
		Credentials []json.RawMessage `json:"credentials"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("SANDBOX_EGRESS_CREDENTIALS: %s: want {\"credentials\": [...]}: %v", path, err)
	}
	var errs []error
	for i, one := range file.Credentials {
		var e operatorEntry
		dec := json.NewDecoder(bytes.NewReader(one))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			errs = append(errs, fmt.Errorf("credential %d: %v", i, err))
			continue
		}
		name := e.Name
		if name == "" {
			errs = append(errs, fmt.Errorf("credential %d: a name, for the audit log and as its secret's", i))
			continue
		}
		if _, dup := op.values[name]; dup {
			errs = append(errs, fmt.Errorf("credential %q: named twice", name))
			continue
		}
		value, err := operatorValue(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("credential %q: %v", name, err))
			continue
		}
		e.Binding.Secret = OperatorPrefix + name
		if err := e.Binding.Check(); err != nil {
			errs = append(errs, err)
			continue
		}
		op.values[e.Binding.Secret] = value
		op.Bindings = append(op.Bindings, e.Binding)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("SANDBOX_EGRESS_CREDENTIALS: %s: %w", path, err)
	}
	if err := egress.CheckBindings(op.Bindings); err != nil {
		return nil, fmt.Errorf("SANDBOX_EGRESS_CREDENTIALS: %s: %w", path, err)
	}
	return op, nil
}

// operatorValue reads an entry's value from the one place it names.
func operatorValue(e operatorEntry) (string, error) {
	var v string
	switch {
	case (e.ValueEnv == "") == (e.ValueFile == ""):
		return "", errors.New("name exactly one of value_env (a variable of the server's environment) and value_file")
	case e.ValueEnv != "":
		var ok bool
		if v, ok = os.LookupEnv(e.ValueEnv); !ok {
			return "", fmt.Errorf("the server's environment has no %s", e.ValueEnv)
		}
	default:
		b, err := os.ReadFile(e.ValueFile)
		if err != nil {
			return "", err
		}
		v = strings.TrimRight(string(b), "\r\n")
	}
	if !headerSafe(v) || len(v) > 8<<10 {
		return "", errors.New("its value must be 1 to 8192 bytes a header may hold (no line breaks or control characters)")
	}
	return v, nil
}

// Secret gives an operator's binding its value.
func (o *Operator) Secret(_ context.Context, name string) (string, error) {
	if v, ok := o.values[name]; ok {
		return v, nil
	}
	return "", fmt.Errorf("not one of the operator's credentials")
}
