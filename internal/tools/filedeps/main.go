// Command filedeps checks the shape of the module's packages: how their files use each
// other, how long their functions are, and that engine packages under internal/ never
// import the root package (docs/architecture.md).
//
//	go run ./internal/tools/filedeps [flags] [packages]
//
// Packages are directories, or patterns ending in /... ("./..." is every package directory
// of the main module below the current one, skipping testdata, directories with their own
// go.mod and directories without non-test Go files); the default is "./...". Only non-test
// files that build on this platform are read (go/build picks them), and each package is
// type-checked with go/types.
//
// A file A uses a file B when an identifier in A, outside comments, resolves to a
// package-level name, a method or a struct field declared in B. For each package filedeps
// prints one line:
//
//	pkg  files  lines  loop=N  pairs=N  longest=fn(N)  root-imports=ok|VIOLATION
//
// loop is the size of the biggest file loop (the largest strongly connected component of
// the file-use graph; 0 when there is none), pairs the number of pairs of files that use
// each other both ways, longest the longest function or method (from the func keyword's
// line to the closing brace's, inclusive), and root-imports whether a package under
// internal/ imports the module's root package without being allowed to (-allow-root).
//
// A package fails when its loop is bigger than -max-loop, it has more pairs than
// -max-pairs, a function longer than -max-func lines, or a root import. Only packages
// matching -only (all when empty) are enforced; the others are reported. The exit status
// is 1 when an enforced package fails, 2 on a usage, parse or type error, 0 otherwise.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// defaultAllowRoot lists the packages under internal/ that may import the root package:
// test and measurement tools, which drive the public API and are not part of the engine.
const defaultAllowRoot = "internal/chaos/...,internal/testbridge,internal/listbench,internal/tools/...,internal/pgtest/..."

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config holds the parsed command line.
type config struct {
	maxLoop, maxPairs, maxFunc int
	allowRoot                  []pattern // module-relative, resolved against the module root
	only                       []pattern // empty: enforce every package
	report, verbose            bool
}

// run is the command: it reads args relative to the working directory and returns the exit
// status. The working directory matters beyond the patterns: the source importer resolves
// imports of the module's own packages with `go list` run there.
func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("filedeps", flag.ContinueOnError)
	fl.SetOutput(stderr)
	maxLoop := fl.Int("max-loop", 6, "fail when a package's biggest file loop has more files than this")
	maxPairs := fl.Int("max-pairs", 5, "fail when a package has more pairs of files using each other both ways than this")
	maxFunc := fl.Int("max-func", 80, "fail when a function or method is longer than this many lines")
	allowRoot := fl.String("allow-root", defaultAllowRoot, "comma-separated package patterns, relative to the module root, under internal/ that may import the root package")
	report := fl.Bool("report", false, "print the line of every package, not only of the failing ones")
	only := fl.String("only", "", "comma-separated package patterns to enforce; the others are reported only (default: all)")
	verbose := fl.Bool("v", false, "print every file-use edge")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "filedeps:", err)
		return 2
	}
	wd, err := os.Getwd()
	if err != nil {
		return fail(err)
	}
	mod, err := findModule(wd)
	if err != nil {
		return fail(err)
	}
	cfg := config{maxLoop: *maxLoop, maxPairs: *maxPairs, maxFunc: *maxFunc, report: *report, verbose: *verbose}
	for _, p := range splitList(*allowRoot) {
		cfg.allowRoot = append(cfg.allowRoot, parsePattern(mod.dir, p))
	}
	for _, p := range splitList(*only) {
		cfg.only = append(cfg.only, parsePattern(wd, p))
	}
	pats := fl.Args()
	if len(pats) == 0 {
		pats = []string{"./..."}
	}
	dirs, err := expand(wd, mod, pats, stderr)
	if err != nil {
		return fail(err)
	}

	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	var results []*result
	for _, dir := range dirs {
		r, err := analyze(fset, imp, mod, dir, cfg)
		if err != nil {
			return fail(err)
		}
		r.name = displayName(wd, dir)
		r.enforced = len(cfg.only) == 0 || matchAny(cfg.only, dir)
		results = append(results, r)
	}
	return print(stdout, results, cfg)
}

// module is the main module: its root directory and module path.
type module struct {
	dir, path string
}

// findModule finds the go.mod at or above dir and reads its module path.
func findModule(dir string) (module, error) {
	for d := dir; ; {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			sc := bufio.NewScanner(strings.NewReader(string(data)))
			for sc.Scan() {
				line := strings.TrimSpace(sc.Text())
				if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
					p := strings.TrimSpace(rest)
					if i := strings.Index(p, "//"); i >= 0 {
						p = strings.TrimSpace(p[:i])
					}
					if u, err := strconv.Unquote(p); err == nil {
						p = u
					}
					if p != "" {
						return module{dir: d, path: p}, nil
					}
				}
			}
			return module{}, fmt.Errorf("%s: no module line", filepath.Join(d, "go.mod"))
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return module{}, err
		}
		parent := filepath.Dir(d)
		if parent == d {
			return module{}, fmt.Errorf("no go.mod at or above %s", dir)
		}
		d = parent
	}
}

// pattern is a package directory, or with recursive set every directory below it too.
type pattern struct {
	dir       string
	recursive bool
}

// parsePattern reads "dir" or "dir/..." relative to base.
func parsePattern(base, s string) pattern {
	var p pattern
	if s == "..." {
		s, p.recursive = ".", true
	} else if rest, ok := strings.CutSuffix(s, "/..."); ok {
		s, p.recursive = rest, true
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(base, filepath.FromSlash(s))
	}
	p.dir = filepath.Clean(s)
	return p
}

func (p pattern) match(dir string) bool {
	if dir == p.dir {
		return true
	}
	return p.recursive && strings.HasPrefix(dir, p.dir+string(filepath.Separator))
}

func matchAny(ps []pattern, dir string) bool {
	for _, p := range ps {
		if p.match(dir) {
			return true
		}
	}
	return false
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// expand turns the command-line patterns into package directories, sorted and without
// duplicates; a recursive pattern that matches nothing is reported on stderr.
func expand(wd string, mod module, args []string, stderr io.Writer) ([]string, error) {
	seen := map[string]bool{}
	var dirs []string
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, a := range args {
		p := parsePattern(wd, a)
		if p.dir != mod.dir && !strings.HasPrefix(p.dir, mod.dir+string(filepath.Separator)) {
			return nil, fmt.Errorf("%s: outside the main module (%s)", a, mod.dir)
		}
		if !p.recursive {
			ok, err := hasPackage(p.dir)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("%s: no non-test Go files", a)
			}
			add(p.dir)
			continue
		}
		before := len(dirs)
		err := filepath.WalkDir(p.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if path != p.dir {
				name := d.Name()
				if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			ok, err := hasPackage(path)
			if err != nil {
				return err
			}
			if ok {
				add(path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(dirs) == before {
			fmt.Fprintf(stderr, "filedeps: %s matched no packages\n", a)
		}
	}
	sort.Strings(dirs)
	return dirs, nil
}

// hasPackage reports whether dir holds non-test Go files that build on this platform.
func hasPackage(dir string) (bool, error) {
	bp, err := build.Default.ImportDir(dir, 0)
	var noGo *build.NoGoError
	if errors.As(err, &noGo) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return len(bp.GoFiles)+len(bp.CgoFiles) > 0, nil
}

func displayName(wd, dir string) string {
	rel, err := filepath.Rel(wd, dir)
	if err != nil || rel == "." {
		return "."
	}
	if strings.HasPrefix(rel, "..") {
		return filepath.ToSlash(rel)
	}
	return "./" + filepath.ToSlash(rel)
}

// result is what filedeps learnt about one package.
type result struct {
	name     string
	enforced bool

	files, lines int
	uses         map[string]map[string]bool // file -> files it uses (base names)
	loop         []string                   // the biggest file loop; nil when there is none
	pairs        [][2]string                // files using each other both ways
	longest      funcLen                    // zero when the package has no function
	long         []funcLen                  // longer than -max-func, longest first
	rootImports  []string                   // files importing the root package, when not allowed
}

type funcLen struct {
	name  string
	pos   string // file:line
	lines int
}

func (r *result) failed(cfg config) bool {
	return len(r.loop) > cfg.maxLoop || len(r.pairs) > cfg.maxPairs || len(r.long) > 0 || len(r.rootImports) > 0
}

// analyze parses and type-checks the package in dir and measures it.
func analyze(fset *token.FileSet, imp types.Importer, mod module, dir string, cfg config) (*result, error) {
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(mod.dir, dir)
	if err != nil {
		return nil, err
	}
	rel = filepath.ToSlash(rel)
	importPath := mod.path
	if rel != "." {
		importPath += "/" + rel
	}

	r := &result{}
	names := append(append([]string(nil), bp.GoFiles...), bp.CgoFiles...)
	sort.Strings(names)
	var files []*ast.File
	for _, name := range names {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		r.files++
		r.lines += fset.File(f.Pos()).LineCount()
	}

	// Type errors would leave uses unresolved and the graph silently short.
	var typeErrs []error
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp, Error: func(err error) { typeErrs = append(typeErrs, err) }}
	pkg, _ := conf.Check(importPath, fset, files, info)
	if len(typeErrs) > 0 {
		return nil, fmt.Errorf("%s: %d type errors, the first: %v", importPath, len(typeErrs), typeErrs[0])
	}

	r.uses = fileUses(fset, pkg, info)
	for _, n := range names {
		for d := range r.uses[n] {
			if n < d && r.uses[d][n] {
				r.pairs = append(r.pairs, [2]string{n, d})
			}
		}
	}
	sort.Slice(r.pairs, func(i, j int) bool {
		if r.pairs[i][0] != r.pairs[j][0] {
			return r.pairs[i][0] < r.pairs[j][0]
		}
		return r.pairs[i][1] < r.pairs[j][1]
	})
	r.loop = biggestLoop(names, r.uses)
	r.longest, r.long = funcLengths(fset, files, cfg.maxFunc)
	if (rel == "internal" || strings.HasPrefix(rel, "internal/")) && !matchAny(cfg.allowRoot, dir) {
		r.rootImports = importers(fset, files, mod.path)
	}
	return r, nil
}

// fileUses returns, for each file of pkg (by base name), the other files it uses: those
// declaring a package-level name, method or field that one of its identifiers resolves to.
func fileUses(fset *token.FileSet, pkg *types.Package, info *types.Info) map[string]map[string]bool {
	uses := map[string]map[string]bool{}
	base := func(pos token.Pos) string { return filepath.Base(fset.Position(pos).Filename) }
	add := func(user string, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		if _, ok := obj.(*types.Label); ok {
			return
		}
		// Fields and methods have no parent scope; package-level names have the
		// package's. Anything else is local to a function, hence to its own file.
		if obj.Parent() != nil && obj.Parent() != pkg.Scope() {
			return
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
	return uses
}

// funcLengths returns the longest function or method of files, and those longer than max
// lines, longest first. A function's length runs from its func keyword's line to its
// closing brace's, inclusive.
func funcLengths(fset *token.FileSet, files []*ast.File, max int) (longest funcLen, long []funcLen) {
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start := fset.Position(fd.Pos())
			fl := funcLen{
				name:  funcName(fd),
				pos:   fmt.Sprintf("%s:%d", filepath.Base(start.Filename), start.Line),
				lines: fset.Position(fd.End()).Line - start.Line + 1,
			}
			if fl.lines > longest.lines {
				longest = fl
			}
			if fl.lines > max {
				long = append(long, fl)
			}
		}
	}
	sort.SliceStable(long, func(i, j int) bool { return long[i].lines > long[j].lines })
	return longest, long
}

// importers returns the files that import the package path.
func importers(fset *token.FileSet, files []*ast.File, path string) []string {
	var out []string
	for _, f := range files {
		for _, is := range f.Imports {
			if p, _ := strconv.Unquote(is.Path.Value); p == path {
				out = append(out, filepath.Base(fset.Position(f.Pos()).Filename))
			}
		}
	}
	return out
}

// funcName is "F" for a function and "T.M" for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.ParenExpr:
			t = x.X
			continue
		}
		break
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// biggestLoop returns the files of the largest strongly connected component of the
// file-use graph with at least two files (Tarjan's algorithm), sorted; nil when the graph
// has no loop. Between components of equal size the one whose first file sorts first wins.
func biggestLoop(nodes []string, edges map[string]map[string]bool) []string {
	index := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var best []string
	next := 0
	var connect func(v string)
	connect = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		succ := make([]string, 0, len(edges[v]))
		for w := range edges[v] {
			succ = append(succ, w)
		}
		sort.Strings(succ)
		for _, w := range succ {
			if _, seen := index[w]; !seen {
				connect(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] != index[v] {
			return
		}
		var comp []string
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		if len(comp) < 2 {
			return
		}
		sort.Strings(comp)
		if len(comp) > len(best) || len(comp) == len(best) && comp[0] < best[0] {
			best = comp
		}
	}
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			connect(v)
		}
	}
	return best
}

// print writes the table, the edges with -v and the failing enforced packages' details,
// and returns the exit status.
func print(w io.Writer, results []*result, cfg config) int {
	status := 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range results {
		failed := r.failed(cfg)
		if !cfg.report && !failed && !cfg.verbose {
			continue
		}
		longest := "-"
		if r.longest.lines > 0 {
			longest = fmt.Sprintf("%s(%d)", r.longest.name, r.longest.lines)
		}
		root := "ok"
		if len(r.rootImports) > 0 {
			root = "VIOLATION"
		}
		verdict := "pass"
		switch {
		case failed && r.enforced:
			verdict = "FAIL"
			status = 1
		case failed:
			verdict = "fail (not enforced)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\tloop=%d\tpairs=%d\tlongest=%s\troot-imports=%s\t%s\n",
			r.name, r.files, r.lines, len(r.loop), len(r.pairs), longest, root, verdict)
	}
	tw.Flush()

	if cfg.verbose {
		for _, r := range results {
			users := make([]string, 0, len(r.uses))
			for u := range r.uses {
				users = append(users, u)
			}
			sort.Strings(users)
			for _, u := range users {
				used := make([]string, 0, len(r.uses[u]))
				for d := range r.uses[u] {
					used = append(used, d)
				}
				sort.Strings(used)
				fmt.Fprintf(w, "%s: %s uses %s\n", r.name, u, strings.Join(used, " "))
			}
		}
	}

	for _, r := range results {
		if !r.enforced || !r.failed(cfg) {
			continue
		}
		fmt.Fprintf(w, "\n%s fails:\n", r.name)
		if len(r.loop) > cfg.maxLoop {
			fmt.Fprintf(w, "  file loop of %d files (max %d): %s\n", len(r.loop), cfg.maxLoop, strings.Join(r.loop, " "))
		}
		if len(r.pairs) > cfg.maxPairs {
			fmt.Fprintf(w, "  %d pairs of files use each other (max %d):\n", len(r.pairs), cfg.maxPairs)
			for _, p := range r.pairs {
				fmt.Fprintf(w, "    %s <-> %s\n", p[0], p[1])
			}
		}
		if len(r.long) > 0 {
			fmt.Fprintf(w, "  functions longer than %d lines:\n", cfg.maxFunc)
			for _, f := range r.long {
				fmt.Fprintf(w, "    %s %s (%d lines)\n", f.pos, f.name, f.lines)
			}
		}
		for _, f := range r.rootImports {
			fmt.Fprintf(w, "  %s imports the root package; engine packages under internal/ must not (-allow-root lists the exceptions)\n", f)
		}
	}
	return status
}
