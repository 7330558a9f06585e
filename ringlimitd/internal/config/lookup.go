package config

import "strings"

// Entry is one entry of a request's descriptor.
type Entry struct{ Key, Value string }

// Lookup is envoyproxy/ratelimit's GetLimit: the limit of the config
// descriptor that the request descriptor's entries lead to, level by level
// (at each level "key_value" first, then a wildcard "key_prefix*" in file
// order, then "key" alone), if the path ends exactly at the last entry and
// that descriptor has a rate_limit. Otherwise nil: the descriptor is not
// limited.
func (d *Domain) Lookup(entries []Entry) *Limit {
	if d == nil {
		return nil
	}
	var found *Limit
	at := &d.root
	for i, e := range entries {
		final := e.Key + "_" + e.Value
		next := at.children[final]
		if next == nil {
			for _, w := range at.wildcard {
				if strings.HasPrefix(final, strings.TrimSuffix(w, "*")) {
					next = at.children[w]
					break
				}
			}
		}
		if next == nil {
			next = at.children[e.Key]
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			found = next.limit
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		at = next
	}
	return found
}
