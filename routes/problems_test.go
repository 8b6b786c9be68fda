package routes_test

import (
	"bytes"
	"testing"

	"github.com/gobridge/gobridge/routes"
)

// TestProblems_WriteGitHub checks the workflow command format and that no
// file name or message can end a command early or start another one.
func TestProblems_WriteGitHub(t *testing.T) {
	ps := routes.Problems{
		{File: "a,b:c%.yaml", Line: 3, Column: 7, Rule: "unknown-key", Severity: routes.SeverityError,
			Message: "100% wrong\r\n::error file=x::injected, really: yes"},
		{File: "ok.yaml", Line: 1, Column: 1, Rule: "unused-sender", Severity: routes.SeverityWarning, Message: "spare"},
		{File: "gone\n.yaml", Rule: "file", Severity: routes.SeverityError, Message: "cannot read the config: no such file or directory"},
	}
	var b bytes.Buffer
	if err := ps.WriteGitHub(&b); err != nil {
		t.Fatal(err)
	}
	want := "::error file=a%2Cb%3Ac%25.yaml,line=3,col=7::unknown-key: 100%25 wrong%0D%0A::error file=x::injected, really: yes\n" +
		"::warning file=ok.yaml,line=1,col=1::unused-sender: spare\n" +
		"::error file=gone%0A.yaml::file: cannot read the config: no such file or directory\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestProblem_StringWithoutLine(t *testing.T) {
	p := routes.Problem{File: "x.yaml", Rule: "file", Severity: routes.SeverityError, Message: "cannot read the config: is a directory"}
	if got, want := p.String(), "x.yaml: file: cannot read the config: is a directory"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
