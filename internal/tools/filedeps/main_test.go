package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writeModule writes a module example.com/m with the given files (slash paths relative to
// its root) into a temporary directory and returns the directory.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.22\n"
	for name, text := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// longFunc is a function named name spanning n lines, from func to the closing brace.
func longFunc(name string, n int) string {
	return "func " + name + "() {\n" + strings.Repeat("\t_ = 0\n", n-2) + "}\n"
}

// normalize collapses the table's column padding to single spaces.
func normalize(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// TestRun runs the command in modules written for each case. The cases do not run in
// parallel: run reads the working directory, where the source importer's `go list` runs.
func TestRun(t *testing.T) {
	otherGOOS := "windows"
	if runtime.GOOS == otherGOOS {
		otherGOOS = "linux"
	}
	loop := map[string]string{
		"a.go": "package m\n\nfunc A() { B() }\n",
		"b.go": "package m\n\nfunc B() { C() }\n",
		"c.go": "package m\n\nfunc C() { A() }\n",
		"d.go": "package m\n\nfunc D() { A() }\n",
	}
	// a.go uses b.go's function, b.go uses a.go's type, its field and its method.
	pair := map[string]string{
		"a.go": "package m\n\ntype T struct{ n int }\n\nfunc (t T) M() int { return t.n + helper() }\n",
		"b.go": "package m\n\nfunc helper() int { return 1 }\n\nfunc use(t T) int { return t.M() + t.n }\n",
	}
	rootImport := func(engine string) map[string]string {
		return map[string]string{
			"root.go":                        "package m\n\nfunc Root() {}\n",
			"internal/" + engine + "/eng.go": "package eng\n\nimport \"example.com/m\"\n\nfunc E() { m.Root() }\n",
			"internal/leaf/leaf.go":          "package leaf\n\nfunc L() {}\n",
		}
	}
	tests := []struct {
		name     string
		files    map[string]string
		args     []string
		wantCode int
		want     []string // lines or parts of lines of the normalized output
		wantNot  []string
	}{
		{
			name:     "three-file loop is found with its files",
			files:    loop,
			args:     []string{"-max-loop", "2", "."},
			wantCode: 1,
			want: []string{
				". 4 12 loop=3 pairs=0 longest=A(1) root-imports=ok FAIL",
				"file loop of 3 files (max 2): a.go b.go c.go\n",
			},
		},
		{
			name:     "three-file loop within the limit passes",
			files:    loop,
			args:     []string{"-max-loop", "3", "-report", "."},
			wantCode: 0,
			want:     []string{". 4 12 loop=3 pairs=0 longest=A(1) root-imports=ok pass"},
			wantNot:  []string{"fails:"},
		},
		{
			name:     "two-way pair is counted",
			files:    pair,
			args:     []string{"-max-pairs", "0", "."},
			wantCode: 1,
			want: []string{
				"loop=2 pairs=1",
				"1 pairs of files use each other (max 0):\na.go <-> b.go\n",
			},
		},
		{
			name:     "every file-use edge with -v",
			files:    pair,
			args:     []string{"-v", "."},
			wantCode: 0,
			want:     []string{".: a.go uses b.go\n.: b.go uses a.go\n"},
		},
		{
			name:     "90-line function is flagged",
			files:    map[string]string{"a.go": "package m\n\n" + longFunc("long", 90) + longFunc("short", 80)},
			args:     []string{"-max-func", "80", "."},
			wantCode: 1,
			want:     []string{"longest=long(90)", "functions longer than 80 lines:\na.go:3 long (90 lines)\n"},
			wantNot:  []string{"short"},
		},
		{
			name:     "80-line function passes -max-func 80",
			files:    map[string]string{"a.go": "package m\n\n" + longFunc("short", 80)},
			args:     []string{"-max-func", "80", "-report", "."},
			wantCode: 0,
			want:     []string{"longest=short(80) root-imports=ok pass"},
		},
		{
			name:     "internal package importing the root is flagged",
			files:    rootImport("eng"),
			args:     []string{"-report", "./..."},
			wantCode: 1,
			want: []string{
				"./internal/eng 1 5 loop=0 pairs=0 longest=E(1) root-imports=VIOLATION FAIL",
				"./internal/leaf 1 3 loop=0 pairs=0 longest=L(1) root-imports=ok pass",
				"eng.go imports the root package",
			},
		},
		{
			name:     "allowed internal package may import the root",
			files:    rootImport("tools/gen"),
			args:     []string{"-report", "-allow-root", "internal/chaos,internal/tools/...", "./..."},
			wantCode: 0,
			want:     []string{"./internal/tools/gen 1 5 loop=0 pairs=0 longest=E(1) root-imports=ok pass"},
		},
		{
			name: "file that builds only on another GOOS is ignored",
			files: map[string]string{
				"a.go":       "package m\n\nfunc A() int { return x() }\n",
				"x_here.go":  "//go:build " + runtime.GOOS + "\n\npackage m\n\nfunc x() int { return 1 }\n",
				"x_other.go": "//go:build " + otherGOOS + "\n\npackage m\n\nfunc x() int { return A() }\n",
			},
			args:     []string{"-report", "-max-pairs", "0", "."},
			wantCode: 0,
			want:     []string{". 2 8 loop=0 pairs=0 longest=A(1) root-imports=ok pass"},
		},
		{
			name: "packages outside -only are reported, not enforced",
			files: map[string]string{
				"a/a.go": "package a\n\n" + longFunc("long", 90),
				"b/b.go": "package b\n\n" + longFunc("long", 90),
			},
			args:     []string{"-only", "./a", "-max-func", "100", "./..."},
			wantCode: 0,
			wantNot:  []string{"fails:"},
		},
		{
			name: "failing package inside -only fails the run",
			files: map[string]string{
				"a/a.go": "package a\n\n" + longFunc("long", 90),
				"b/b.go": "package b\n\n" + longFunc("long", 90),
			},
			args:     []string{"-only", "./b/...", "./..."},
			wantCode: 1,
			want:     []string{"./a 1 92 loop=0 pairs=0 longest=long(90) root-imports=ok fail (not enforced)", "./b 1 92 loop=0 pairs=0 longest=long(90) root-imports=ok FAIL", "./b fails:"},
			wantNot:  []string{"./a fails:"},
		},
		{
			name: "./... skips testdata, nested modules and test-only directories",
			files: map[string]string{
				"a/a.go":             "package a\n",
				"testdata/t/t.go":    "package t\n\nfunc (",
				"nested/go.mod":      "module example.com/nested\n",
				"nested/n.go":        "package n\n\nfunc (",
				"tests/x_test.go":    "package x\n",
				"other/x_plan9.go":   "package x\n\nfunc (",
				"ignored/ignored.go": "//go:build ignore\n\npackage main\n\nfunc (",
			},
			args:     []string{"-report", "./..."},
			wantCode: 0,
			want:     []string{"./a 1 1 loop=0 pairs=0 longest=- root-imports=ok pass"},
			wantNot:  []string{"testdata", "nested", "tests", "other", "ignored"},
		},
		{
			name:     "unknown flag is a usage error",
			files:    map[string]string{"a.go": "package m\n"},
			args:     []string{"-files", "a", "."},
			wantCode: 2,
		},
		{
			name:     "type error is an error, not a silently short graph",
			files:    map[string]string{"a.go": "package m\n\nfunc A() { undefined() }\n"},
			args:     []string{"."},
			wantCode: 2,
		},
		{
			name:     "directory without Go files is an error",
			files:    map[string]string{"a.go": "package m\n", "empty/README": "x\n"},
			args:     []string{"./empty"},
			wantCode: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(writeModule(t, tt.files))
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			out := normalize(stdout.String())
			if code != tt.wantCode {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q\nstdout:\n%s\nstderr:\n%s", w, stdout.String(), stderr.String())
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q\nstdout:\n%s", w, stdout.String())
				}
			}
		})
	}
}

func TestBiggestLoop(t *testing.T) {
	t.Parallel()
	edges := func(pairs ...string) map[string]map[string]bool {
		m := map[string]map[string]bool{}
		for _, p := range pairs {
			from, to, _ := strings.Cut(p, ">")
			if m[from] == nil {
				m[from] = map[string]bool{}
			}
			m[from][to] = true
		}
		return m
	}
	tests := []struct {
		name  string
		nodes []string
		edges map[string]map[string]bool
		want  string
	}{
		{"no edges", []string{"a", "b"}, edges(), ""},
		{"chain", []string{"a", "b", "c"}, edges("a>b", "b>c"), ""},
		{"self-use is no loop", []string{"a"}, edges("a>a"), ""},
		{"pair", []string{"a", "b"}, edges("a>b", "b>a"), "a b"},
		{"two loops, the bigger wins", []string{"a", "b", "c", "d", "e"}, edges("a>b", "b>a", "c>d", "d>e", "e>c", "b>c"), "c d e"},
		{"equal loops, the first by name wins", []string{"a", "b", "c", "d"}, edges("c>d", "d>c", "a>b", "b>a"), "a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := strings.Join(biggestLoop(tt.nodes, tt.edges), " "); got != tt.want {
				t.Errorf("biggestLoop = %q, want %q", got, tt.want)
			}
		})
	}
}
