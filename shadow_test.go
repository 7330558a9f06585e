package ringlimit_test

import (
	"context"
	"testing"

	"github.com/ringlimit/ringlimit"
)

func TestShadowContext(t *testing.T) {
	ctx := context.Background()
	if ringlimit.IsShadow(ctx) {
		t.Error("a plain context is marked")
	}
	s := ringlimit.WithShadow(ctx)
	if !ringlimit.IsShadow(s) {
		t.Error("WithShadow's context is not marked")
	}
	c, cancel := context.WithCancel(s)
	defer cancel()
	if !ringlimit.IsShadow(c) {
		t.Error("a context derived from a marked one is not marked")
	}
}
