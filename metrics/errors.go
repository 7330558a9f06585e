package metrics

import "errors"

// ErrNil is returned, wrapped, when Register and its kin are given a nil
// registry or a nil thing to observe.
var ErrNil = errors.New("metrics: nil argument")
