//go:build race

package worker_test

// raceBuild: the tests run under the race detector, and so do the
// `hooklane worker` processes they start.
const raceBuild = true
