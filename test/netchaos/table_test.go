package netchaos

import (
	"fmt"
	"strings"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// row is one scenario's figures, in test/chaos's RESULTS.md format, and
// what this suite adds to its note.
type row struct {
	chaoskit.Row
	cutOff int            // keys held to the cut-off bound because the store decided some of their calls
	drops  map[string]int // node → the most times one ring dropped it
}

func renderTable(rows []row) string {
	var out []chaoskit.Row
	for _, r := range rows {
		note := r.Note
		if len(r.drops) > 0 {
			note += "; rings dropped a node " + dropNote(r.drops)
		}
		if r.cutOff > 0 {
			note += fmt.Sprintf("; %d keys had store decisions (their owner's forward failed or timed out) and are held to the cut-off bound", r.cutOff)
		}
		r.Note = strings.TrimPrefix(note, "; ")
		out = append(out, r.Row)
	}
	return chaoskit.Table(out)
}
