package ringlimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

func TestBinding(t *testing.T) {
	ok := func(rem int64) ringlimit.Decision {
		return ringlimit.Decision{Allowed: true, Limit: 10, Remaining: rem}
	}
	no := func(retry time.Duration) ringlimit.Decision {
		return ringlimit.Decision{Allowed: false, Limit: 10, RetryAfter: retry}
	}
	for _, c := range []struct {
		name string
		ds   []ringlimit.Decision
		want int // index in ds, -1 for the zero Decision
	}{
		{"none", nil, -1},
		{"one", []ringlimit.Decision{ok(3)}, 0},
		{"least remaining", []ringlimit.Decision{ok(5), ok(2), ok(9)}, 1},
		{"first of equal remaining", []ringlimit.Decision{ok(2), ok(2)}, 0},
		{"a denial beats any remaining", []ringlimit.Decision{ok(0), no(time.Second)}, 1},
		{"longest denial", []ringlimit.Decision{no(time.Second), ok(1), no(time.Hour), no(time.Minute)}, 2},
		{"first of equal denials", []ringlimit.Decision{no(time.Second), no(time.Second)}, 0},
	} {
		got := ringlimit.Binding(c.ds)
		var want ringlimit.Decision
		if c.want >= 0 {
			want = c.ds[c.want]
		}
		if got != want {
			t.Errorf("%s: Binding = %+v, want %+v", c.name, got, want)
		}
		if c.want >= 0 && len(c.ds) > 1 {
			// Which of equal Decisions is returned matters only by value;
			// make sure the index is the one meant by perturbing it.
			ds := append([]ringlimit.Decision(nil), c.ds...)
			ds[c.want].Limit = 99
			if ringlimit.Binding(ds).Limit != 99 {
				t.Errorf("%s: Binding did not pick index %d", c.name, c.want)
			}
		}
	}
}

func TestValidateRules(t *testing.T) {
	good := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Second}
	bad := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 0, Window: time.Second}
	many := make([]ringlimit.Rule, ringlimit.MaxRules+1)
	for i := range many {
		many[i] = good
	}
	if err := ringlimit.ValidateRules(many[:ringlimit.MaxRules]); err != nil {
		t.Fatalf("%d rules: %v", ringlimit.MaxRules, err)
	}
	for _, c := range []struct {
		name  string
		rules []ringlimit.Rule
	}{
		{"none", nil},
		{"too many", many},
		{"a bad one", []ringlimit.Rule{good, bad}},
	} {
		if err := ringlimit.ValidateRules(c.rules); !errors.Is(err, ringlimit.ErrInvalidRule) {
			t.Errorf("%s: %v, want ErrInvalidRule", c.name, err)
		}
	}
}
