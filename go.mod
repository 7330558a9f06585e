module github.com/ringlimit/ringlimit

go 1.25
