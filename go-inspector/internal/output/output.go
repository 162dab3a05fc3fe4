// Package output renders inspection results. Only the JSON contract goes to
// the writer it is given (stdout in the CLI); diagnostics belong on stderr.
package output

import (
	"encoding/json"
	"io"

	"github.com/icepack-dev/icepack/go-inspector/internal/inspect"
)

// CodeInspectionFailed is the contract's error code for any failed inspection.
const CodeInspectionFailed = "INSPECTION_FAILED"

// Output is where the CLI sends its single result.
type Output interface {
	// Status writes a successful inspection.
	Status(st *inspect.TableStatus) error
	// Error writes a failed inspection.
	Error(code string, err error) error
}

// ErrorBody is the contract's error object.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// errorEnvelope wraps ErrorBody as {"error": {...}}.
type errorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// JSON writes exactly one JSON object per call, followed by a newline.
type JSON struct {
	W io.Writer
}

// Status implements Output.
func (j JSON) Status(st *inspect.TableStatus) error { return j.write(st) }

// Error implements Output.
func (j JSON) Error(code string, err error) error {
	return j.write(errorEnvelope{Error: ErrorBody{Code: code, Message: err.Error()}})
}

func (j JSON) write(v any) error {
	enc := json.NewEncoder(j.W)
	// Bucket keys such as "<1MiB" must stay readable, not \u003c-escaped.
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
