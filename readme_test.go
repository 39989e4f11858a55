package lease_test

import (
	"bytes"
	"flag"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var updateREADME = flag.Bool("update-readme", false, "rewrite README.md's example programs from example_test.go")

// readmeBlock is a marker naming an Example function of example_test.go,
// followed by a fenced Go block: the block must be that example as a
// complete program (package main, the imports its body uses, func main with
// its body, without the // Output: comment).
var readmeBlock = regexp.MustCompile("(?s)<!-- example: (\\w+) -->\n```go\n(.*?)```\n")

// readmeBody is a marker naming a test file (relative to the module root,
// possibly in a nested module) and an Example function in it, followed by a
// fenced Go block: the block must be that function's body, one tab of
// indentation removed, without the // Output: comment. It is for snippets
// that are not whole programs (the OpenTelemetry module's, which this
// module cannot import).
var readmeBody = regexp.MustCompile("(?s)<!-- example-body: (\\S+) (\\w+) -->\n```go\n(.*?)```\n")

// TestREADMESnippets fails when README.md drifts from the compiled
// examples: every Go block in the README must be marked, and every marked
// block must equal the program built from its Example function. Run
//
//	go test -run TestREADMESnippets -update-readme .
//
// to rewrite the blocks after changing an example.
func TestREADMESnippets(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}

	for _, want := range []string{
		"github.com/leasekit/lease", "go get github.com/leasekit/lease",
		"go run ./examples/quickstart", "./scripts/test",
	} {
		if !bytes.Contains(readme, []byte(want)) {
			t.Errorf("README.md does not contain %q", want)
		}
	}
	if n, marked := bytes.Count(readme, []byte("```go\n")), len(readmeBlock.FindAll(readme, -1))+len(readmeBody.FindAll(readme, -1)); n != marked {
		t.Errorf("README.md has %d Go blocks but only %d are marked with <!-- example: Name --> or <!-- example-body: file Name -->", n, marked)
	}
	seen := map[string]bool{}
	out := readmeBlock.ReplaceAllFunc(readme, func(m []byte) []byte {
		sub := readmeBlock.FindSubmatch(m)
		name, got := string(sub[1]), string(sub[2])
		seen[name] = true
		want, err := exampleProgram(fset, file, src, name)
		if err != nil {
			t.Errorf("README block %s: %v", name, err)
			return m
		}
		if got != want && !*updateREADME {
			t.Errorf("README block %s differs from %s in example_test.go; run go test -run TestREADMESnippets -update-readme . and review the diff. Want:\n%s", name, name, want)
		}
		return []byte("<!-- example: " + name + " -->\n```go\n" + want + "```\n")
	})
	out = readmeBody.ReplaceAllFunc(out, func(m []byte) []byte {
		sub := readmeBody.FindSubmatch(m)
		path, name, got := string(sub[1]), string(sub[2]), string(sub[3])
		want, err := exampleBody(path, name)
		if err != nil {
			t.Errorf("README block %s %s: %v", path, name, err)
			return m
		}
		if got != want && !*updateREADME {
			t.Errorf("README block %s %s differs from that function's body; run go test -run TestREADMESnippets -update-readme . and review the diff. Want:\n%s", path, name, want)
		}
		return []byte("<!-- example-body: " + path + " " + name + " -->\n```go\n" + want + "```\n")
	})
	for _, name := range []string{"Example", "Example_valkey", "Example_postgres", "Example_leaderElection", "Example_scheduledJob"} {
		if !seen[name] {
			t.Errorf("README.md has no block for %s", name)
		}
	}
	if *updateREADME && !bytes.Equal(out, readme) {
		if err := os.WriteFile("README.md", out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// exampleBody returns the body of function name in the Go file at path,
// without its braces, one tab of indentation and its // Output: comment.
func exampleBody(path, name string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range file.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name || fn.Recv != nil {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		if i := strings.Index(body, "\t// Output:"); i >= 0 {
			body = body[:i]
		}
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimPrefix(body, "\n"), "\n") {
			if line != "" || b.Len() > 0 {
				b.WriteString(strings.TrimPrefix(line, "\t"))
				b.WriteString("\n")
			}
		}
		return strings.TrimRight(b.String(), "\n") + "\n", nil
	}
	return "", errorString("no function " + name + " in " + path)
}

// exampleProgram renders the Example function name of file as a complete,
// gofmt-formatted program.
func exampleProgram(fset *token.FileSet, file *ast.File, src []byte, name string) (string, error) {
	var fn *ast.FuncDecl
	for _, d := range file.Decls {
		if f, ok := d.(*ast.FuncDecl); ok && f.Name.Name == name && f.Recv == nil {
			fn = f
		}
	}
	if fn == nil {
		return "", errorString("no function " + name + " in example_test.go")
	}
	body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
	if i := strings.Index(body, "\t// Output:"); i >= 0 {
		body = body[:i]
	}

	// The imports the body uses, in the file's order and groups.
	used := map[string]bool{}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	var imports strings.Builder
	lastLine := 0
	for _, spec := range file.Imports {
		path, _ := strconv.Unquote(spec.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if spec.Name != nil {
			local = spec.Name.Name
		}
		if !used[local] {
			continue
		}
		line := fset.Position(spec.Pos()).Line
		if lastLine != 0 && line > lastLine+1 && hasGroupBreak(fset, file, lastLine, line) {
			imports.WriteString("\n")
		}
		lastLine = line
		imports.WriteString("\t")
		if spec.Name != nil {
			imports.WriteString(spec.Name.Name + " ")
		}
		imports.WriteString(spec.Path.Value + "\n")
	}
	prog := "package main\n\nimport (\n" + imports.String() + ")\n\nfunc main() {" + body + "}\n"
	formatted, err := format.Source([]byte(prog))
	if err != nil {
		return "", err
	}
	return string(formatted), nil
}

// hasGroupBreak reports whether a blank line separates the import lines
// from and to (exclusive) in file's import block, skipping imports that
// were left out.
func hasGroupBreak(fset *token.FileSet, file *ast.File, from, to int) bool {
	lines := map[int]bool{}
	for _, spec := range file.Imports {
		lines[fset.Position(spec.Pos()).Line] = true
	}
	for l := from + 1; l < to; l++ {
		if !lines[l] {
			return true
		}
	}
	return false
}

type errorString string

func (e errorString) Error() string { return string(e) }
