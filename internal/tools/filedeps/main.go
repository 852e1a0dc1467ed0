// Command filedeps prints which root files of package skiplock use which, and the pairs
// of files that use each other both ways. A file A uses file B when an identifier in A
// (outside comments) resolves to a package-level name, a method or a struct field declared
// in B. It guards the engine's direction (README, "Architecture"):
//
//	go run ./internal/tools/filedeps [-files claim,flow,...] [dir]
//
// With -files, only those files (names without .go) are checked, and the exit status is
// 1 when two of them use each other.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	only := flag.String("files", "", "comma-separated file names (without .go) to check; empty: all")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var files []*ast.File
	for name, p := range pkgs {
		if name != "skiplock" {
			continue
		}
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), Error: func(error) {}}
	_, _ = conf.Check("skiplock", fset, files, info)

	base := func(pos token.Pos) string {
		return strings.TrimSuffix(filepath.Base(fset.Position(pos).Filename), ".go")
	}
	uses := map[string]map[string]bool{} // user -> used
	add := func(user string, obj types.Object) {
		if obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != "skiplock" || !obj.Pos().IsValid() {
			return
		}
		// Local variables and parameters belong to their own file.
		if v, ok := obj.(*types.Var); ok && !v.IsField() && obj.Parent() != obj.Pkg().Scope() {
			return
		}
		if _, ok := obj.(*types.Label); ok {
			return
		}
		if obj.Parent() != nil && obj.Parent() != obj.Pkg().Scope() {
			if _, isType := obj.(*types.TypeName); !isType {
				return
			}
			return // a local type
		}
		def := base(obj.Pos())
		if def == user {
			return
		}
		if uses[user] == nil {
			uses[user] = map[string]bool{}
		}
		uses[user][def] = true
	}
	for id, obj := range info.Uses {
		add(base(id.Pos()), obj)
	}
	for sel, s := range info.Selections {
		add(base(sel.Pos()), s.Obj())
	}

	want := map[string]bool{}
	if *only != "" {
		for _, f := range strings.Split(*only, ",") {
			want[f] = true
		}
	}
	in := func(f string) bool { return len(want) == 0 || want[f] }
	var users []string
	for u := range uses {
		if in(u) {
			users = append(users, u)
		}
	}
	sort.Strings(users)
	var both []string
	for _, u := range users {
		var used []string
		for d := range uses[u] {
			if in(d) {
				used = append(used, d)
				if u < d && uses[d][u] {
					both = append(both, u+" <-> "+d)
				}
			}
		}
		sort.Strings(used)
		fmt.Printf("%-12s uses %s\n", u, strings.Join(used, " "))
	}
	sort.Strings(both)
	fmt.Printf("files that use each other both ways: %d\n", len(both))
	for _, b := range both {
		fmt.Println("  " + b)
	}
	if len(both) > 0 && len(want) > 0 {
		os.Exit(1)
	}
}
