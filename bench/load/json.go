package load

import (
	"encoding/json"
	"io"
)

// WriteJSON writes the whole report, rounds included, as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
