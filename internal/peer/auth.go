package peer

import (
	"crypto/hkdf"
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
// secret, without sending it, agrees on a protocol version, derives the keys
// that seal every frame after it, and tells the client which node it
// reached:
//
//	server → client: "RLP" | highest version spoken u8 | nonce S (32 bytes) | name length u8 | name
//	client → server: "RLP" | chosen version v u8 | nonce C | HMAC-SHA256(secret, "client" | v | S | C)
//	server → client: HMAC-SHA256(secret, "server" | v | C | S | name)
//
// The client chooses the highest version both speak, so a new frame format
// can be rolled out node by node: a node that speaks versions up to N still
// talks to one that speaks up to N-1 (version 3, which puts several frames
// in a record, talks to version 2 one frame a record). The proofs cover v,
// so nobody without the secret can talk two nodes down to an older version.
//
// A client that expects a name refuses any other, so an address that leads
// to the wrong node (a stale address, or a node's own server behind an
// address that means another host) fails instead of deciding elsewhere.
//
// During a rotation a server accepts several secrets (ServerConfig.Accept):
// it checks the client's proof under each, and answers and seals with the
// one that matches, so the client, which proves only its own secret, needs
// no extra round trip. A client never tries a second secret: the rotation's
// steps (see node.Config.SecretKeys) keep every server accepting what every
// client sends.
//
// With a secret, each side then derives two AES-256-GCM keys with HKDF-SHA256
// over the secret, salted with both nonces: one for each direction. Fresh
// nonces on both sides make every connection's keys new, so a recorded
// handshake or frame is useless on any other connection (see wire.go for the
// sealing). With an empty secret the exchange still runs (and checks the
// protocol), but proves nothing and frames travel in clear: that mode is for
// demos.
var magic = [3]byte{'R', 'L', 'P'}

// minVersion is the oldest version this package speaks: version 1 sent
// frames in clear after the handshake, and is refused.
const minVersion = 2

const (
	nonceLen = 32
	keyLen   = 32 // AES-256
)

// ErrAuth is returned when the other side does not prove it holds the secret.
var ErrAuth = errors.New("peer: authentication failed")

// ErrVersion is returned when the two sides speak no common version.
var ErrVersion = errors.New("peer: no common protocol version")

func mac(secret []byte, label string, v byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label))
	h.Write([]byte{v})
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

// keys derives the connection's sealers: client to server, server to
// client. Both are nil without a secret.
func keys(secret []byte, v byte, s, c []byte) (c2s, s2c *sealer, err error) {
	if len(secret) == 0 {
		return nil, nil, nil
	}
	salt := append(append(make([]byte, 0, 2*nonceLen), s...), c...)
	for i, info := range [2]string{"client to server", "server to client"} {
		k, err := hkdf.Key(sha256.New, secret, salt, fmt.Sprintf("ringlimit peer v%d %s", v, info), keyLen)
		if err != nil {
			return nil, nil, fmt.Errorf("peer: derive keys: %w", err)
		}
		sl, err := newSealer(k)
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			c2s = sl
		} else {
			s2c = sl
		}
	}
	return c2s, s2c, nil
}

// serverHandshake runs the server's side on c within timeout, accepting a
// proof of any of secrets (secrets[0] is the server's own; an empty one
// means no secret). It returns the sealers for what it sends and what it
// receives (nil without a secret).
func serverHandshake(c net.Conn, secrets [][]byte, name string, timeout time.Duration) (tx, rx *sealer, err error) {
	tx, rx, _, err = serverHandshakeUpTo(c, secrets, name, timeout, Version)
	return tx, rx, err
}

// serverHandshakeUpTo is serverHandshake for a server that speaks versions
// up to most (tests play a node of an earlier release with it), and also
// returns the version the client chose.
func serverHandshakeUpTo(c net.Conn, secrets [][]byte, name string, timeout time.Duration, most byte) (tx, rx *sealer, v byte, err error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	s, err := nonce()
	if err != nil {
		return nil, nil, 0, err
	}
	greeting := append(append(append(magic[:], most), s...), byte(len(name)))
	if _, err := c.Write(append(greeting, name...)); err != nil {
		return nil, nil, 0, fmt.Errorf("peer: handshake: %w", err)
	}
	in := make([]byte, len(magic)+1+nonceLen+sha256.Size)
	if _, err := io.ReadFull(c, in); err != nil {
		return nil, nil, 0, fmt.Errorf("peer: handshake: %w", err)
	}
	if [3]byte(in[:3]) != magic {
		return nil, nil, 0, fmt.Errorf("%w: bad magic %q", ErrAuth, in[:3])
	}
	v = in[3]
	if v < minVersion || v > most {
		return nil, nil, 0, fmt.Errorf("%w: client chose version %d, this node speaks %d to %d", ErrVersion, v, minVersion, most)
	}
	cn := in[4 : 4+nonceLen]
	var secret []byte
	found := false
	for _, k := range secrets {
		if hmac.Equal(in[4+nonceLen:], mac(k, "client", v, s, cn)) {
			secret, found = k, true
			break
		}
	}
	if !found {
		return nil, nil, 0, fmt.Errorf("%w: client proof", ErrAuth)
	}
	if _, err := c.Write(mac(secret, "server", v, cn, s, []byte(name))); err != nil {
		return nil, nil, 0, fmt.Errorf("peer: handshake: %w", err)
	}
	c2s, s2c, err := keys(secret, v, s, cn)
	return s2c, c2s, v, err
}

// clientHandshake runs the client's side on c within timeout. If want is
// not empty, the server must be the node of that name. It returns the
// sealers for what it sends and what it receives (nil without a secret).
func clientHandshake(c net.Conn, secret []byte, want string, timeout time.Duration) (tx, rx *sealer, err error) {
	tx, rx, _, err = clientHandshakeUpTo(c, secret, want, timeout, Version)
	return tx, rx, err
}

// clientHandshakeUpTo is clientHandshake for a client that speaks versions
// up to most, and also returns the version it chose.
func clientHandshakeUpTo(c net.Conn, secret []byte, want string, timeout time.Duration, most byte) (tx, rx *sealer, v byte, err error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	in := make([]byte, len(magic)+1+nonceLen+1)
	if _, err := io.ReadFull(c, in); err != nil {
		return nil, nil, 0, fmt.Errorf("peer: handshake: %w", err)
	}
	if [3]byte(in[:3]) != magic {
		return nil, nil, 0, fmt.Errorf("%w: bad magic %q", ErrAuth, in[:3])
	}
	v = min(in[3], most)
	if v < minVersion {
		return nil, nil, 0, fmt.Errorf("%w: server speaks up to version %d, this node %d to %d", ErrVersion, in[3], minVersion, most)
	}
	s := in[4 : 4+nonceLen]
	name := make([]byte, in[4+nonceLen])
	if _, err := io.ReadFull(c, name); err != nil {
		return nil, nil, 0, fmt.Errorf("peer: handshake: %w", err)
	}
	if want != "" && string(name) != want {
		return nil, nil, 0, fmt.Errorf("%w: reached node %q, want %q", ErrAuth, name, want)
	}
	cn, err := nonce()
	if err != nil {
		return nil, nil, 0, err
	}
	out := append(append(append(magic[:], v), cn...), mac(secret, "client", v, s, cn)...)
	if _, err := c.Write(out); err != nil {
		return nil, nil, 0, fmt.Errorf("peer: handshake: %w", err)
	}
	proof := make([]byte, sha256.Size)
	if _, err := io.ReadFull(c, proof); err != nil {
		// The server closes without a word when our proof is wrong.
		return nil, nil, 0, fmt.Errorf("%w: server closed the handshake: %w", ErrAuth, err)
	}
	if !hmac.Equal(proof, mac(secret, "server", v, cn, s, name)) {
		return nil, nil, 0, fmt.Errorf("%w: server proof", ErrAuth)
	}
	tx, rx, err = keys(secret, v, s, cn)
	return tx, rx, v, err
}
