package peer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

// TestRotationAcceptsEitherSecret walks the three steps of a rotation from
// old to new: a server accepts a client proving any secret it accepts, and
// the connection works (sealed under that secret) in one handshake; a
// secret it does not accept, or an empty accepted secret, lets nobody in.
func TestRotationAcceptsEitherSecret(t *testing.T) {
	old, next, other := []byte("old-secret-01234"), []byte("new-secret-01234"), []byte("unknown-secret-0")
	tests := []struct {
		name   string
		secret []byte
		accept [][]byte
		client []byte
		ok     bool
	}{
		{"step 1: old, accepting new; client old", old, [][]byte{next}, old, true},
		{"step 1: old, accepting new; client new", old, [][]byte{next}, next, true},
		{"step 2: new, accepting old; client old", next, [][]byte{old}, old, true},
		{"step 2: new, accepting old; client new", next, [][]byte{old}, next, true},
		{"step 3: new only; client old", next, nil, old, false},
		{"unknown secret", next, [][]byte{old}, other, false},
		{"no secret", next, [][]byte{old}, nil, false},
		{"an empty accepted secret lets no one in without one", next, [][]byte{nil, old}, nil, false},
		{"accept without a secret is ignored", nil, [][]byte{old}, old, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := local.New(local.Config{Clock: testclock.New(time.Now())})
			s := Serve(listen(t), ServerConfig{Secret: tt.secret, Accept: tt.accept, Handler: LimiterHandler{l}})
			t.Cleanup(func() { s.Close() })
			c := newClient(t, s.Addr().String(), tt.client, time.Second)
			for i := range 2 { // the second call reuses the sealed connection
				res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
				if tt.ok && (err != nil || res.Err != nil || !res.Decision.Allowed) {
					t.Fatalf("call %d: %+v, %v", i+1, res, err)
				}
				if !tt.ok && !errors.Is(err, ErrAuth) {
					t.Fatalf("call %d: err %v, want ErrAuth", i+1, err)
				}
			}
		})
	}
}
