package loadtest

import (
	"testing"

	"github.com/hooklane/hooklane/deploy/testkit"
)

// Each test starts the servers it needs; TestMain checks for goroutines
// left behind.
func TestMain(m *testing.M) { testkit.Main(m, nil) }
