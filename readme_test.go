package ringlimit_test

import (
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadmeGoSnippets keeps the Go in README.md and docs/*.md honest: every
// ```go block is compiled, with its imports. A block that is a complete
// program (it starts with "package main") is vetted, and so compiled, in a
// module outside the repository that requires the core and grpclimit as a
// user's would (outsideModule), and must be gofmt'ed. Any other block must
// appear, line for line, in the body of an Example function of one of this
// module's packages (or grpclimit's): go vet and go test compile those (and
// run the ones with an Output comment), so a block that no longer compiles,
// or that drifts from its Example, fails here or there.
func TestReadmeGoSnippets(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	programs := map[string]string{} // folder in the outside module → main.go
	where := map[string]string{}    // folder → file:line of its block
	blocks := 0
	for _, name := range append([]string{"README.md"}, docs...) {
		md, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range goBlocks(string(md)) {
			blocks++
			at := fmt.Sprintf("%s:%d", name, s.line)
			if strings.HasPrefix(strings.TrimSpace(s.text), "package main") {
				src := s.text + "\n"
				if f, err := format.Source([]byte(src)); err != nil || string(f) != src {
					t.Errorf("%s: this program is not gofmt'ed (%v)", at, err)
				}
				dir := fmt.Sprintf("p%d", len(programs))
				programs[dir+"/main.go"] = src
				where[dir] = at
				continue
			}
			if bodies == nil {
				if bodies, err = exampleBodies("."); err != nil {
					t.Fatal(err)
				}
				if len(bodies) == 0 {
					t.Fatal("no Example function found in the module")
				}
			}
			found := false
			for _, b := range bodies {
				if strings.Contains("\n"+b+"\n", "\n"+s.text+"\n") {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: this ```go block is neither a complete program (package main, with its imports) nor in an Example function (copy it, gofmt'ed, into the Example of the package it shows):\n%s", at, s.text)
			}
		}
	}
	if blocks == 0 {
		t.Fatal("README.md and docs/*.md have no ```go block: the extraction is broken")
	}
	if len(programs) == 0 {
		t.Error("README.md has no complete program (package main, with its imports)")
		return
	}
	if testing.Short() {
		t.Skip("compiling the programs builds gRPC: not in -short")
	}
	var dirs []string
	for d := range where {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		t.Logf("%s: %s", d, where[d])
	}
	goRun(t, outsideModule(t, programs), "vet", "./...")
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
var testedModules = map[string]bool{"grpclimit": true, "ringlimitd": true}

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
