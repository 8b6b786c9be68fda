package routes_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/routes"
)

var update = flag.Bool("update", false, "rewrite testdata/config/*.golden from the current output")

// noEnv is an empty environment, so results do not depend on the machine.
func noEnv(string) (string, bool) { return "", false }

// parseFile parses a file of the repository (path relative to its root),
// naming it as `gobridge check` run from the root would.
func parseFile(t *testing.T, rel string) (*routes.Config, routes.Problems) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	cfg, probs, err := routes.ParseWithEnv(bytes.NewReader(data), rel, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, probs
}

// TestParse_Golden checks the exact problems reported for every broken
// config in testdata/config. Run with -update to regenerate the goldens.
func TestParse_Golden(t *testing.T) {
	cases, err := filepath.Glob("../testdata/config/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("found %d cases, want at least 30", len(cases))
	}
	for _, c := range cases {
		name := strings.TrimSuffix(filepath.Base(c), ".yaml")
		t.Run(name, func(t *testing.T) {
			_, probs := parseFile(t, "testdata/config/"+name+".yaml")
			var got bytes.Buffer
			if err := probs.WriteText(&got); err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(c, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./routes -run TestParse_Golden -update)", err)
			}
			if got.String() != string(want) {
				t.Errorf("problems differ from %s\ngot:\n%s\nwant:\n%s", golden, got.String(), want)
			}
			if len(probs) == 0 {
				t.Errorf("%s reports no problem; every case must be invalid or warn", name)
			}
		})
	}
}

// TestBlueprints checks that every blueprint loads without errors and
// without warnings, with an empty environment.
func TestBlueprints(t *testing.T) {
	files, err := filepath.Glob("../blueprints/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d blueprints, want at least 4", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, probs := parseFile(t, "blueprints/"+filepath.Base(f))
			if cfg == nil || len(probs) > 0 {
				var b bytes.Buffer
				_ = probs.WriteText(&b)
				t.Fatalf("blueprint has problems:\n%s", b.String())
			}
		})
	}
}
