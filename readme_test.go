package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test the README and the benchmark notes name as holding a promise
// exists: a renamed or deleted test cannot leave a promise pointing at
// nothing.
func TestNamedTestsExist(t *testing.T) {
	have := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w+)\(`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		for _, m := range decl.FindAllSubmatch(b, -1) {
			have[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Benchmark|Fuzz)[A-Z]\\w*)")
	for _, doc := range []string{"README.md", "deploy/BENCHMARKS.md", "deploy/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range named.FindAllSubmatch(b, -1) {
			n++
			if !have[string(m[1])] {
				t.Errorf("%s names %s, which no _test.go declares", doc, m[1])
			}
		}
		if doc == "README.md" && n < 50 {
			t.Errorf("README.md names %d tests; the pattern no longer reads its table", n)
		}
	}
}
