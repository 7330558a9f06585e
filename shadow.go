package ringlimit

import "context"

type shadowKey struct{}

// WithShadow returns a copy of ctx that marks the calls made with it as
// shadow calls: the caller decides as usual but will not enforce a denial
// (a rule being tried out on live traffic). Limiters decide exactly as
// without it; instrumentation counts such denials apart (node counts them as
// shadow_denied).
func WithShadow(ctx context.Context) context.Context {
	return context.WithValue(ctx, shadowKey{}, true)
}

// IsShadow reports whether ctx was marked by WithShadow.
func IsShadow(ctx context.Context) bool {
	v, _ := ctx.Value(shadowKey{}).(bool)
	return v
}
