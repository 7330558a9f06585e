package httplimit

import (
	"fmt"
	"net/http"

	"github.com/ringlimit/ringlimit/rules"
)

// fixedKey is the fixed rule's key: "name:" and the key function's result.
func (m *Middleware) fixedKey(r *http.Request) (string, error) {
	var buf [128]byte
	b := append(append(buf[:0], m.name...), ':')
	if m.key == nil {
		b, err := m.ip.appendKey(b, r)
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	k, err := m.key(r)
	if err != nil {
		return "", err
	}
	return string(append(b, k...)), nil
}

// specKey is a rule's key: "name:" and its key spec's parts joined by "|".
func (m *Middleware) specKey(rl *rules.Rule, r *http.Request) (string, error) {
	var buf [128]byte
	b := append(append(buf[:0], rl.Name...), ':')
	for i := range rl.Key.Len() {
		if i > 0 {
			b = append(b, '|')
		}
		switch p := rl.Key.Part(i); p.Kind {
		case rules.KeyIP:
			var err error
			if b, err = m.ip.appendKey(b, r); err != nil {
				return "", err
			}
		case rules.KeyHeader:
			v := headerValue(r, p.Header)
			if v == "" {
				return "", fmt.Errorf("%w: no %s header", ErrNoKey, p.Header)
			}
			b = append(b, v...)
		case rules.KeyRoute:
			b = append(b, route(r)...)
		}
	}
	return string(b), nil
}
