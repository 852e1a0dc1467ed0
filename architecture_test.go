package skiplock_test

// The layers docs/architecture.md draws are the import graph: a test that fails when a
// package imports a layer above its own, or when the page and the code disagree on which
// packages there are.

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/skiplock/skiplock"

// architectureLayers reads the layer block of docs/architecture.md: package → layer.
func architectureLayers(t *testing.T) map[string]int {
	t.Helper()
	page, err := os.ReadFile("docs/architecture.md")
	require.NoError(t, err)
	layers := map[string]int{}
	for _, line := range strings.Split(string(page), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "layer" {
			continue
		}
		n := int(f[1][0] - '0')
		for _, p := range f[2:] {
			switch {
			case p == "skiplock":
				layers[modulePath] = n
			case strings.HasPrefix(p, "internal/"):
				layers[modulePath+"/"+p] = n
			}
		}
	}
	require.NotEmpty(t, layers, "docs/architecture.md has a layer block")
	return layers
}

func TestArchitecture_EachPackageImportsOnlyLayersBelowIt(t *testing.T) {
	t.Parallel()
	layers := architectureLayers(t)
	out, err := exec.Command("go", "list", "-json", ".", "./internal/...").Output()
	require.NoError(t, err, "go list")
	dec := json.NewDecoder(strings.NewReader(string(out)))
	engine := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		require.NoError(t, dec.Decode(&p))
		layer, drawn := layers[p.ImportPath]
		if !drawn {
			continue // test tools and harnesses (chaos, pgtest, ...) are not engine layers
		}
		engine[p.ImportPath] = true
		for _, imp := range p.Imports {
			il, ok := layers[imp]
			if !ok {
				require.False(t, imp == modulePath, "%s imports the root package", p.ImportPath)
				require.False(t, p.ImportPath == modulePath && strings.HasPrefix(imp, modulePath+"/internal/") && imp != modulePath+"/internal/testbridge",
					"the root imports %s, which docs/architecture.md does not draw", imp)
				continue
			}
			require.Less(t, il, layer, "%s (layer %d) imports %s (layer %d): docs/architecture.md says a package imports only layers below its own",
				p.ImportPath, layer, imp, il)
		}
	}
	for p := range layers {
		require.True(t, engine[p], "docs/architecture.md draws %s, which does not exist", p)
	}
}
