package main

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if binary != "" {
			os.RemoveAll(filepath.Dir(binary))
		}
		os.Exit(code)
	}))
}
