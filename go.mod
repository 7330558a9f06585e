module github.com/ringlimit/ringlimit

go 1.25.0

require (
	github.com/sony/gobreaker/v2 v2.4.0
	go.uber.org/goleak v1.3.0
)
