package depcheck

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSabotageOnlyInVerificationBuilds: the protocol's and the stage
// host's sabotage switches are test hooks. A default build of package
// protocol exports none of them; the parsley_sabotage build of each
// package turns them on; and outside the two files that define them, only
// tests carry that build tag.
func TestSabotageOnlyInVerificationBuilds(t *testing.T) {
	root := moduleRoot(t)
	proto := filepath.Join(root, "protocol")
	def := strings.Fields(goList(t, root, "-f", "{{join .GoFiles \" \"}}", "./protocol"))
	for _, f := range def {
		for _, name := range exportedNames(t, filepath.Join(proto, f)) {
			if strings.Contains(name, "Sabotage") {
				t.Errorf("protocol/%s exports %s in the default build", f, name)
			}
		}
	}
	for _, pkg := range []string{"./protocol", "./stage"} {
		def := strings.Fields(goList(t, root, "-f", "{{join .GoFiles \" \"}}", pkg))
		tagged := strings.Fields(goList(t, root, "-tags", "parsley_sabotage", "-f", "{{join .GoFiles \" \"}}", pkg))
		if !slices.Contains(tagged, "sabotage_on.go") || slices.Contains(def, "sabotage_on.go") {
			t.Errorf("%s/sabotage_on.go must build with parsley_sabotage only: default %v, tagged %v", pkg, def, tagged)
		}
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if rel != filepath.Join("protocol", "sabotage_on.go") && rel != filepath.Join("stage", "sabotage_on.go") && taggedSabotage(t, path) {
			t.Errorf("%s is production code built with parsley_sabotage; only tests, protocol/sabotage_on.go and stage/sabotage_on.go may be", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// taggedSabotage reports whether the file's build constraint holds only
// with the parsley_sabotage tag.
func taggedSabotage(t *testing.T, path string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range f.Comments {
		for _, c := range g.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			with := expr.Eval(func(tag string) bool { return tag == "parsley_sabotage" })
			without := expr.Eval(func(string) bool { return false })
			return with && !without
		}
	}
	return false
}

func exportedNames(t *testing.T, path string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() {
				out = append(out, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out = append(out, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}
