package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// guaranteesDoc holds the table of every promise and the tests that hold it.
const guaranteesDoc = "deploy/GUARANTEES.md"

// markdownFiles are the repository's *.md files, outside dot folders.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var docs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 5 {
		t.Fatalf("found only %v", docs)
	}
	return docs
}

// Every test a document names as holding a promise exists: a renamed or
// deleted test cannot leave a promise pointing at nothing.
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
	for _, doc := range markdownFiles(t) {
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
		if doc == guaranteesDoc && n < 50 {
			t.Errorf("%s names %d tests; the pattern no longer reads its table", doc, n)
		}
	}
}

// The README is one a newcomer finishes: under 300 lines, the two commands
// and the first publish in its first 40, and the sections the issue asks
// for.
func TestREADMEIsShortAndStartsWithTheCommands(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) >= 300 {
		t.Errorf("README.md has %d lines; want under 300 (the long reference goes to deploy/ and web/)", len(lines))
	}
	top := strings.Join(lines[:min(40, len(lines))], "\n")
	for _, want := range []string{"make run ", "make test ", "-X POST $API/v1/events"} {
		if !strings.Contains(top, want) {
			t.Errorf("README.md's first 40 lines lack %q", want)
		}
	}
	for _, h := range []string{"Contents", "Production checklist", "Troubleshooting", "Verifying a signature"} {
		if !strings.Contains(string(b), "\n## "+h+"\n") && !strings.Contains(string(b), "**"+h+":**") {
			t.Errorf("README.md has no %q", h)
		}
	}
}

// The README's two commands are the Makefile's targets and what CI runs.
func TestREADMECommandsAreTheMakefilesAndCIs(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"run", "test"} {
		if !regexp.MustCompile(`(?m)^` + target + `:.*## \S`).Match(mk) {
			t.Errorf("the Makefile has no %s target with a ## help text (make help lists it)", target)
		}
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	ciLines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if last := ciLines[len(ciLines)-1]; last != "make test" {
		t.Errorf(".ci/run ends with %q; want the README's test command, make test", last)
	}
}

// The receiver samples the README shows are the files the worker's test
// runs (TestReceiverSamplesVerifyTheWorkersRequests), byte for byte.
func TestREADMEShowsTheTestedVerifySamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for lang, file := range map[string]string{"go": "verify.go", "js": "verify.js", "python": "verify.py"} {
		src, err := os.ReadFile("deploy/examples/verify/" + file)
		if err != nil {
			t.Fatal(err)
		}
		block := "```" + lang + "\n" + string(src) + "```\n"
		if !bytes.Contains(readme, []byte(block)) {
			t.Errorf("README.md does not show deploy/examples/verify/%s as it is (a ```%s block of the whole file)", file, lang)
		}
	}
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdFence = regexp.MustCompile("^\\s*(```|~~~)")
)

// anchors are the ids GitHub gives a Markdown file's headings: lower case,
// punctuation dropped, spaces as hyphens, -1, -2… for repeats.
func anchors(doc []byte) map[string]bool {
	ids, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(doc), "\n") {
		if mdFence.MatchString(line) {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var id strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				id.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				id.WriteRune(r)
			}
		}
		s := id.String()
		if n := seen[s]; n > 0 {
			ids[s+"-"+strconv.Itoa(n)] = true
		} else {
			ids[s] = true
		}
		seen[s]++
	}
	return ids
}

// Every relative link in every Markdown file names a file that exists,
// and its #anchor a heading of that file: moving a section cannot leave a
// link pointing at nothing.
func TestREADMEAndEveryDocsLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	for _, doc := range markdownFiles(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for i, line := range strings.Split(string(b), "\n") {
			if mdFence.MatchString(line) {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(link, "#")
				target := doc
				if path != "" {
					target = filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))
				}
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d links %s: no file %s", doc, i+1, link, target)
					continue
				}
				if anchor == "" || !strings.HasSuffix(target, ".md") {
					continue
				}
				if cache[target] == nil {
					tb, err := os.ReadFile(target)
					if err != nil {
						t.Fatal(err)
					}
					cache[target] = anchors(tb)
				}
				if !cache[target][anchor] {
					t.Errorf("%s:%d links %s: %s has no heading #%s", doc, i+1, link, target, anchor)
				}
			}
		}
	}
}
