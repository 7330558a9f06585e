package peer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The handshake proves to each side that the other holds the cluster's
// secret, without sending it, before any frame is served, and tells the
// client which node it reached:
//
//	server → client: magic | nonce S (32 bytes) | name length u8 | name
//	client → server: magic | nonce C | HMAC-SHA256(secret, "client" | S | C)
//	server → client: HMAC-SHA256(secret, "server" | C | S | name)
//
// A client that expects a name refuses any other, so an address that leads
// to the wrong node (a stale address, or a node's own server behind an
// address that means another host) fails instead of deciding elsewhere.
//
// Fresh nonces on both sides make a recorded handshake useless. With an empty
// secret the exchange still runs (and checks the protocol), but proves
// nothing: that mode is for demos.
var magic = [4]byte{'R', 'L', 'P', Version}

const nonceLen = 32

// ErrAuth is returned when the other side does not prove it holds the secret.
var ErrAuth = errors.New("peer: authentication failed")

func mac(secret []byte, label string, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func nonce() ([]byte, error) {
	n := make([]byte, nonceLen)
	_, err := rand.Read(n)
	return n, err
}

// serverHandshake runs the server's side on c within timeout.
func serverHandshake(c net.Conn, secret []byte, name string, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	s, err := nonce()
	if err != nil {
		return err
	}
	greeting := append(append(magic[:], s...), byte(len(name)))
	if _, err := c.Write(append(greeting, name...)); err != nil {
		return fmt.Errorf("peer: handshake: %w", err)
	}
	in := make([]byte, len(magic)+nonceLen+sha256.Size)
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("peer: handshake: %w", err)
	}
	if [4]byte(in[:4]) != magic {
		return fmt.Errorf("%w: bad magic %q", ErrAuth, in[:4])
	}
	cn := in[4 : 4+nonceLen]
	if !hmac.Equal(in[4+nonceLen:], mac(secret, "client", s, cn)) {
		return fmt.Errorf("%w: client proof", ErrAuth)
	}
	if _, err := c.Write(mac(secret, "server", cn, s, []byte(name))); err != nil {
		return fmt.Errorf("peer: handshake: %w", err)
	}
	return nil
}

// clientHandshake runs the client's side on c within timeout. If want is
// not empty, the server must be the node of that name.
func clientHandshake(c net.Conn, secret []byte, want string, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	in := make([]byte, len(magic)+nonceLen+1)
	if _, err := io.ReadFull(c, in); err != nil {
		return fmt.Errorf("peer: handshake: %w", err)
	}
	if [4]byte(in[:4]) != magic {
		return fmt.Errorf("%w: bad magic %q", ErrAuth, in[:4])
	}
	s := in[4 : 4+nonceLen]
	name := make([]byte, in[4+nonceLen])
	if _, err := io.ReadFull(c, name); err != nil {
		return fmt.Errorf("peer: handshake: %w", err)
	}
	if want != "" && string(name) != want {
		return fmt.Errorf("%w: reached node %q, want %q", ErrAuth, name, want)
	}
	cn, err := nonce()
	if err != nil {
		return err
	}
	out := append(append(magic[:], cn...), mac(secret, "client", s, cn)...)
	if _, err := c.Write(out); err != nil {
		return fmt.Errorf("peer: handshake: %w", err)
	}
	proof := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, proof); err != nil {
		// The server closes without a word when our proof is wrong.
		return fmt.Errorf("%w: server closed the handshake: %w", ErrAuth, err)
	}
	if !hmac.Equal(proof, mac(secret, "server", cn, s, []byte(name))) {
		return fmt.Errorf("%w: server proof", ErrAuth)
	}
	return nil
}
