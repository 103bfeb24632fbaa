package main_test

import (
	"os"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopEngine()  // the docker tier's, where a test started it
	testutil.StopCluster() // the kubernetes tier's, likewise
	os.Exit(code)
}
