package ring

import (
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, addr := range []string{"", "127.0.0.1:9000", "[::1]:7000", strings.Repeat("h", 300) + ":1"} {
		b := meta{RPCAddr: addr}.encode()
		if b[0] != metaVersion {
			t.Fatalf("encoding starts with %d, want version %d", b[0], metaVersion)
		}
		got, err := decodeMeta(b)
		if err != nil || got.RPCAddr != addr {
			t.Fatalf("decode(encode(%q)) = %q, %v", addr, got.RPCAddr, err)
		}
	}
}

// A newer member may append fields and raise the version; an older one
// still reads the fields it knows.
func TestMetaReadsNewerVersions(t *testing.T) {
	b := meta{RPCAddr: "10.0.0.1:9000"}.encode()
	b[0] = metaVersion + 1
	b = append(b, 0x07, 'x', 'y')
	got, err := decodeMeta(b)
	if err != nil || got.RPCAddr != "10.0.0.1:9000" {
		t.Fatalf("decode of a newer version = %+v, %v", got, err)
	}
}

func TestMetaRejectsMalformed(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		{0},                   // version 0 does not exist
		{metaVersion},         // no length
		{metaVersion, 5, 'a'}, // length past the end
		{metaVersion, 0x80},   // truncated varint
		{metaVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // huge length
	} {
		if got, err := decodeMeta(b); err == nil {
			t.Errorf("decodeMeta(%v) = %+v, want an error", b, got)
		}
	}
}
