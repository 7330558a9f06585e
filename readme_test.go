package ringlimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeGoSnippetsAreExamples keeps the README's Go honest: every ```go
// block of README.md must appear, line for line, in the body of an Example
// function of one of this module's packages. go vet and go test compile
// those functions (and run the ones with an Output comment), so a snippet
// that no longer compiles, or that drifts from its Example, fails here or
// there.
func TestReadmeGoSnippetsAreExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippets := goBlocks(string(readme))
	if len(snippets) == 0 {
		t.Fatal("README.md has no ```go block: the extraction is broken")
	}
	bodies, err := exampleBodies(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) == 0 {
		t.Fatal("no Example function found in the module")
	}
	for _, s := range snippets {
		found := false
		for _, b := range bodies {
			if strings.Contains("\n"+b+"\n", "\n"+s.text+"\n") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md:%d: this ```go block is in no Example function (copy it, gofmt'ed, into the Example of the package it shows):\n%s", s.line, s.text)
		}
	}
}

type snippet struct {
	line int // of the opening fence
	text string
}

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(md string) []snippet {
	var out []snippet
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		out = append(out, snippet{line: start + 1, text: strings.Join(body, "\n")})
	}
	return out
}

// testedModules are the nested modules whose tests test.sh runs too, so
// that their Example functions are compiled like this module's.
var testedModules = map[string]bool{"grpclimit": true}

// exampleBodies returns the body of every Example function in the test
// files of the module rooted at root and of the nested modules in
// testedModules (not of the others, which nothing compiles), each line
// stripped of the body's one tab of indentation.
func exampleBodies(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			if path != root && !testedModules[filepath.ToSlash(path)] {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
			lines := strings.Split(strings.Trim(body, "\n"), "\n")
			for i, l := range lines {
				lines[i] = strings.TrimPrefix(l, "\t")
			}
			out = append(out, strings.Join(lines, "\n"))
		}
		return nil
	})
	return out, err
}
