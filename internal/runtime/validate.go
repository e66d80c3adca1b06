package runtime

import (
	_ "embed"
	"io"
	"maps"
)

//go:embed validator.py
var validatorFile string

// validatorSource is the validator as it runs: cell.py, which the harness
// shares, then validator.py.
var validatorSource = cellSource + "\n" + validatorFile

// ValidatorArgv starts the static analyzer behind validate_code. It runs in
// a jail like any code: parsing untrusted source is itself untrusted work.
func ValidatorArgv(interpreter string) []string {
	if interpreter == "" {
		interpreter = DefaultInterpreter
	}
	return []string{interpreter, "-I", "-B", "-X", "utf8", "-c", validatorSource}
}

// ValidateRequest asks the analyzer about code under an import policy.
type ValidateRequest struct {
	Code           string
	AllowedImports []string // nil: policy off
	Profile        string   // label for messages
	// Profiles maps every profile to its modules; Enabled lists those the
	// operator enabled; Settings says how to enable each.
	Profiles map[string][]string
	Enabled  []string
	Settings map[string]string
}

// Validation is the analyzer's answer (the seed's validate_code shape).
type Validation struct {
	Validation struct {
		Valid    bool     `json:"valid"`
		Errors   []string `json:"errors"`
		Warnings []string `json:"warnings"`
		Message  string   `json:"message"`
	} `json:"validation"`
	Analysis struct {
		LineCount           int      `json:"line_count"`
		CharacterCount      int      `json:"character_count"`
		EstimatedComplexity string   `json:"estimated_complexity"`
		Imports             []string `json:"imports"`
		RequiredProfiles    []string `json:"required_profiles"`
		Functions           int      `json:"functions"`
		Classes             int      `json:"classes"`
		Loops               int      `json:"loops"`
		MaxNesting          int      `json:"max_nesting"`
	} `json:"analysis"`
	SyntaxError *struct {
		Message string `json:"message"`
		Line    *int   `json:"line"`
		Column  *int   `json:"column"`
		Text    string `json:"text"`
	} `json:"syntax_error"`
	Recommendations []string `json:"recommendations"`
}

// WriteValidateRequest sends req to the analyzer as one frame.
func WriteValidateRequest(w io.Writer, req ValidateRequest) error {
	profiles := make(map[string]any, len(req.Profiles))
	for k, v := range req.Profiles {
		profiles[k] = v
	}
	settings := maps.Clone(req.Settings)
	if settings == nil {
		settings = map[string]string{}
	}
	body, err := appendMarshal(nil, map[string]any{
		"code":             req.Code,
		"allowed_imports":  req.AllowedImports,
		"profile":          req.Profile,
		"profiles":         profiles,
		"enabled_profiles": append([]string{}, req.Enabled...),
		"profile_settings": settings,
	})
	if err != nil {
		return err
	}
	return writeFrame(w, body)
}

// ReadValidation reads the analyzer's reply.
func ReadValidation(r io.Reader, v *Validation) error {
	return readJSONFrame(r, v, MaxReplyBytes)
}
