module github.com/ringlimit/ringlimit

go 1.25.0

require (
	github.com/valkey-io/valkey-go v1.0.79
	go.uber.org/goleak v1.3.0
)

require golang.org/x/sys v0.47.0 // indirect
