// Command gobridge bridges MQTT to SQS, HTTP and other targets with an
// at-least-once outbox. Run `gobridge help` for the subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gobridge/gobridge/routes"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command failed, or the config is invalid
	exitUsage   = 2 // bad command line
)

// errUsage marks a command-line mistake (exit 2); the command has already
// printed its usage.
var errUsage = errors.New("usage error")

// errInvalid marks a config with errors (exit 1); the problems are printed.
var errInvalid = errors.New("invalid config")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and maps its error to an exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "check":
		err = (&CheckCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "version", "--version", "-version", "-v":
		err = (&VersionCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "schema":
		err = (&SchemaCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "run":
		err = (&RunCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "dlq":
		err = (&DLQCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "outbox":
		err = (&OutboxCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "dynamodb":
		err = (&DynamoDBCommand{Stdout: stdout, Stderr: stderr}).Run(ctx, rest)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "gobridge: unknown command %q\n\n", cmd)
		usage(stderr)
		return exitUsage
	}
	var help helpRequest
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &help):
		help.fs.SetOutput(stdout)
		help.fs.Usage()
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, errInvalid):
		return exitFailure
	default: // an error may quote a dead letter's ID, which a publisher chose
		fmt.Fprintf(stderr, "gobridge: %s\n", safeBlock(err.Error()))
		return exitFailure
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `gobridge bridges MQTT messages to SQS, HTTP and stdout, at least once.

Usage:
  gobridge run -c FILE                          run the bridge until SIGINT/SIGTERM (SIGHUP reloads)
  gobridge check [--format text|json|github] [--strict] FILE...
                                                validate configs (files or globs)
  gobridge dlq list|show|requeue|drop -c FILE   inspect, requeue or drop dead letters
  gobridge outbox stats -c FILE                 live records, oldest, dead letters, drain rate
  gobridge dynamodb create-tables -c FILE       create the config's DynamoDB tables and indexes
  gobridge schema                               print the config's JSON Schema
  gobridge version                              print version, commit, build date, Go version
                                                (also: gobridge --version, gobridge -v)
  gobridge help                                 show this help

Run "gobridge COMMAND -h" for a command's flags.
`)
}

// loadConfig is the one loader every subcommand uses, so that `check`
// reports exactly what `run` would refuse. It returns the config with
// defaults applied and every problem found; compile steps that belong to
// other packages (such as expression compilation in processors) add their
// problems here.
func loadConfig(path string) (*routes.Config, routes.Problems, error) {
	cfg, probs, err := routes.Load(path)
	if err != nil {
		return nil, nil, err
	}
	if cfg != nil {
		probs = append(probs, compileProblems(cfg, probs)...)
	}
	probs.Sort()
	return cfg, probs, nil
}
