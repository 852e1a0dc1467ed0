package skiplock_test

// Tests of the manual as a reader meets it: every Go block of README.md and docs/*.md
// compiles against this checkout, the getting-started program is the README's
// quickstart (which readme_test.go runs), and every relative link leads somewhere.
//
// A Go block is one of:
//
//   - a whole file: its first line that is not blank or a comment is a package clause;
//     it is built as it is, in a package of its own;
//   - a fragment, marked by an HTML comment on the line just before its fence:
//     <!-- go:body --> for statements, built as the body of a function whose
//     parameters are ctx, pool, client, w, tx and t (see docBlockBody), or
//     <!-- go:decl --> for declarations at package level. Both see the names every
//     fragment shares (docWorld: the job kinds the manual uses and a few helpers)
//     and the imports of docBlockImports.
//
// Add "otel" to the marker (<!-- go:body otel -->) for a block that uses the otel
// module (package skiplockotel): those blocks are built in a module of their own that
// requires it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docBlock is one ```go block of a Markdown file.
type docBlock struct {
	file string // README.md, docs/x.md
	line int    // the line of its opening fence
	mode string // "file", "body" or "decl"
	otel bool   // built with the otel module
	code string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docFiles are the Markdown files whose Go blocks must compile.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages, "no docs/*.md found")
	return append([]string{"README.md"}, pages...)
}

var blockMarker = regexp.MustCompile(`^<!--\s*go:(body|decl)(\s+otel)?\s*-->$`)

// docBlocks returns the ```go blocks of a Markdown file, each with its mode.
func docBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(string(src), "\n")
	var blocks []docBlock
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		start := i
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, lines[i])
		}
		require.Less(t, i, len(lines), "%s:%d: a code block that never closes", file, start+1)
		if fence != "```go" {
			continue
		}
		b := docBlock{file: file, line: start + 1, code: strings.Join(code, "\n") + "\n"}
		if start > 0 {
			if m := blockMarker.FindStringSubmatch(strings.TrimSpace(lines[start-1])); m != nil {
				b.mode, b.otel = m[1], m[2] != ""
			}
		}
		if b.mode == "" {
			require.Truef(t, isWholeFile(b.code),
				"%s: this Go block is neither a whole file (starting with a package clause) nor marked as a fragment: put <!-- go:body --> (statements) or <!-- go:decl --> (declarations) on the line before its fence", b)
			b.mode = "file"
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// isWholeFile reports whether code's first line that is not blank or a comment is a
// package clause.
func isWholeFile(code string) bool {
	for l := range strings.Lines(code) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

// docBlockImports are the packages a fragment may use without importing them; each is
// used once at package level so that a fragment needs not use them all.
var docBlockImports = []struct{ path, name, use string }{
	{"context", "context", "context.Background"},
	{"errors", "errors", "errors.New"},
	{"fmt", "fmt", "fmt.Sprint"},
	{"log", "log", "log.Printf"},
	{"net/http", "http", "http.NewServeMux"},
	{"os", "os", "os.Getenv"},
	{"testing", "testing", "testing.Short"},
	{"time", "time", "time.Second"},
	{"github.com/jackc/pgx/v5", "pgx", "pgx.Identifier{}"},
	{"github.com/jackc/pgx/v5/pgxpool", "pgxpool", "pgxpool.New"},
	{"github.com/jackc/pgx/v5/stdlib", "stdlib", "stdlib.OpenDBFromPool"},
	{"github.com/stretchr/testify/require", "require", "require.NoError"},
	{"github.com/skiplock/skiplock", "skiplock", "skiplock.DefaultQueue"},
	{"github.com/skiplock/skiplock/cron", "cron", "cron.MustParse"},
	{"github.com/skiplock/skiplock/skiplocktest", "skiplocktest", "skiplocktest.Drain"},
	{"github.com/skiplock/skiplock/ui", "ui", "ui.New"},
}

var docBlockOtelImport = struct{ path, name, use string }{"github.com/skiplock/skiplock/otel", "skiplockotel", "skiplockotel.New"}

// docBlockBody is the function a <!-- go:body --> block is the body of. The block sits in
// a block of its own, so it may declare ctx, tx, w… again with :=.
const docBlockBody = `func _(ctx context.Context, pool *pgxpool.Pool, client *skiplock.Client, w *skiplock.Worker, tx pgx.Tx, t *testing.T) error {
	{
%s
	}
	return nil
}
`

// docWorld is what every fragment may name: the job kinds the manual uses, and the
// helpers its examples call. It is declared in a file of its own beside each fragment.
const docWorld = `
type SendConfirmation struct {
	OrderID int64 ` + "`json:\"order_id\"`" + `
}

func (SendConfirmation) Kind() string { return "send_confirmation" }

type SendEmail struct {
	OrderID int64  ` + "`json:\"order_id\"`" + `
	To      string ` + "`json:\"to\"`" + `
}

func (SendEmail) Kind() string { return "send_email" }

type BuildReport struct {
	CustomerID string ` + "`json:\"customer_id\"`" + `
}

func (BuildReport) Kind() string { return "build_report" }

type SendDigest struct{}

func (SendDigest) Kind() string { return "send_digest" }

type SyncCRM struct{}

func (SyncCRM) Kind() string { return "sync_crm" }

type Charge struct{ Order int64 }

func (Charge) Kind() string { return "charge" }

type Reserve struct{ Order int64 }

func (Reserve) Kind() string { return "reserve" }

type Invoice struct{ Order int64 }

func (Invoice) Kind() string { return "invoice" }

type Ship struct{ Order int64 }

func (Ship) Kind() string { return "ship" }

type Resize struct {
	ImageID int64 ` + "`json:\"image_id\"`" + `
}

func (Resize) Kind() string { return "resize" }

// sendEmail stands for the work of a handler.
func sendEmail(ctx context.Context, orderID int64) error { return nil }

// placeOrder stands for a service's own function that writes an order and enqueues its
// confirmation in the caller's transaction.
func placeOrder(ctx context.Context, tx pgx.Tx, client *skiplock.Client, email string) int64 {
	return 0
}

type Export struct{ Parts []string }

func (Export) Kind() string { return "export" }

type ExportResult struct{ URL string }

// txKey is a context key of the service's own.
type txKey struct{}

// rateLimitSMTP stands for a middleware of the service's own.
var rateLimitSMTP skiplock.Middleware = func(next skiplock.JobHandler) skiplock.JobHandler { return next }

// sentryReporter stands for an error tracker's ErrorHandler.
type sentryReporter struct{}

func (sentryReporter) HandleError(ctx context.Context, job *skiplock.JobRow, status skiplock.JobStatus, err error) {
}
func (sentryReporter) HandleStuck(ctx context.Context, job *skiplock.JobRow, timeout time.Duration) {}

// requireAdmin and userFrom stand for the service's own authentication.
func requireAdmin(h http.Handler) http.Handler { return h }
func userFrom(ctx context.Context) string      { return "" }

// testDB stands for a test helper of the service's own: a pool and a client on a
// migrated schema of the test's own.
func testDB(t *testing.T) (*pgxpool.Pool, *skiplock.Client) { return nil, nil }
`

// writeDocModule writes blocks into dir as a module: one package per block, built against
// the checkout at root. With otel, the module is the otel module's go.mod (which requires
// this checkout through a replace directive, as the root module is required here).
func writeDocModule(t *testing.T, dir, root string, blocks []docBlock, otel bool) {
	t.Helper()
	modFile := "go.mod"
	if otel {
		modFile = "otel/go.mod"
	}
	srcMod, err := os.ReadFile(modFile)
	require.NoError(t, err)
	_, reqs, ok := strings.Cut(string(srcMod), "\nrequire ")
	require.True(t, ok, "%s has no require block", modFile)
	// Drop the source module's own replace lines: ours follow.
	var kept []string
	for l := range strings.Lines("require " + reqs) {
		if !strings.HasPrefix(strings.TrimSpace(l), "replace ") {
			kept = append(kept, l)
		}
	}
	gomod := "module docblocks\n\ngo 1.26.0\n\n" + strings.Join(kept, "") +
		"\nreplace github.com/skiplock/skiplock => " + root + "\n"
	if otel {
		gomod += "\nrequire github.com/skiplock/skiplock/otel v0.0.0\n" +
			"\nreplace github.com/skiplock/skiplock/otel => " + filepath.Join(root, "otel") + "\n"
	} else {
		gomod += "\nrequire github.com/skiplock/skiplock v0.0.0\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	// The root module's sums, and the otel module's: fragments import the root's
	// dependencies in both.
	sums := []string{"go.sum"}
	if otel {
		sums = append(sums, "otel/go.sum")
	}
	var sum []byte
	for _, f := range sums {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		sum = append(sum, b...)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	imports := docBlockImports
	if otel {
		imports = append(imports[:len(imports):len(imports)], docBlockOtelImport)
	}
	var header strings.Builder
	header.WriteString("import (\n")
	for _, im := range imports {
		fmt.Fprintf(&header, "\t%s %q\n", im.name, im.path)
	}
	header.WriteString(")\n\n")
	for _, im := range imports {
		fmt.Fprintf(&header, "var _ = %s\n", im.use)
	}

	for i, b := range blocks {
		// The package's directory names the block, so that a compile error says which.
		name := fmt.Sprintf("b%03d_%s_line%d", i, strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(b.file), b.line)
		pkgDir := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(pkgDir, 0o755))
		if b.mode == "file" {
			require.NoError(t, os.WriteFile(filepath.Join(pkgDir, "block.go"), []byte(b.code), 0o644))
			continue
		}
		pkg := "package docblock\n\n"
		world := pkg + header.String() + docWorld
		require.NoError(t, os.WriteFile(filepath.Join(pkgDir, "world.go"), []byte(world), 0o644))
		// A //line directive makes the compiler report the Markdown file and line.
		code := fmt.Sprintf("//line %s:%d\n", b.file, b.line+1) + b.code
		if b.mode == "body" {
			code = fmt.Sprintf(docBlockBody, code)
		}
		src := pkg + header.String() + "\n" + code
		require.NoError(t, os.WriteFile(filepath.Join(pkgDir, "block.go"), []byte(src), 0o644))
	}
}

// buildDocModule runs go build on every package of the module in dir, offline.
func buildDocModule(ctx context.Context, dir string) ([]byte, error) {
	build := exec.CommandContext(ctx, "go", "build", "./...")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	return build.CombinedOutput()
}

// TestDocs_EveryGoBlockCompiles builds every ```go block of README.md and docs/*.md, each
// in a package of its own, with one go build per module (the root one, and the otel one
// for blocks that use it).
func TestDocs_EveryGoBlockCompiles(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	var plain, otel []docBlock
	for _, f := range docFiles(t) {
		for _, b := range docBlocks(t, f) {
			if b.otel {
				otel = append(otel, b)
			} else {
				plain = append(plain, b)
			}
		}
	}
	require.NotEmpty(t, plain)
	t.Logf("%d Go blocks, %d of them with the otel module", len(plain)+len(otel), len(otel))

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	type result struct {
		name string
		out  []byte
		err  error
	}
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i, set := range [][]docBlock{plain, otel} {
		if len(set) == 0 {
			continue
		}
		dir := t.TempDir()
		writeDocModule(t, dir, root, set, i == 1)
		wg.Go(func() {
			out, err := buildDocModule(ctx, dir)
			results[i] = result{name: map[int]string{0: "the root module", 1: "the otel module"}[i], out: out, err: err}
		})
	}
	wg.Wait()
	for _, r := range results {
		if r.err == nil {
			continue
		}
		hint := ""
		if strings.Contains(string(r.out), "module lookup disabled") {
			hint = "\n(a module is missing from the module cache: run `go mod download` in the repository root and in otel/; `make test` does it in its vet step)"
		}
		t.Errorf("a Go block of the docs does not compile (built with %s; a block's package is named after its file and line):\n%s%s", r.name, r.out, hint)
	}
}

// TestDocs_GettingStartedIsTheReadmeQuickstart keeps the getting-started page's program
// the one TestReadme_QuickstartRunsWithoutWarning runs against a database.
func TestDocs_GettingStartedIsTheReadmeQuickstart(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, "docs/getting-started.md")
	require.NotEmpty(t, blocks)
	require.Equal(t, readmeQuickstart(t), blocks[0].code,
		"docs/getting-started.md's first Go block must be README.md's quickstart, as is (the README's is the one run by TestReadme_QuickstartRunsWithoutWarning)")
}

// TestDocs_GrantsAreTheReadmeGrants keeps every copy of the least-privilege grants in
// docs/ the block privilege_test.go runs (README.md's).
func TestDocs_GrantsAreTheReadmeGrants(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	want := grantsBlock.FindSubmatch(readme)
	require.NotNil(t, want, "README.md has no grants block")
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	for _, p := range pages {
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, m := range grantsBlock.FindAllSubmatch(src, -1) {
			require.Equal(t, string(want[1]), string(m[1]), "%s's grants block differs from README.md's, which privilege_test.go runs", p)
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocs_RelativeLinksResolve fails on a link from README.md or docs/ to a file of the
// repository that does not exist.
func TestDocs_RelativeLinksResolve(t *testing.T) {
	t.Parallel()
	for _, f := range docFiles(t) {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range mdLink.FindAllStringSubmatch(string(src), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			p := filepath.Join(filepath.Dir(f), target)
			_, err := os.Stat(p)
			require.NoErrorf(t, err, "%s links to %s, which does not exist", f, m[1])
		}
	}
}
