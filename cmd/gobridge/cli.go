package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gobridge/gobridge/routes"
)

// Command-line plumbing the subcommands share.

// newFlags returns the flag set of a command: mistakes go to stderr, followed
// by the help and the flags.
func newFlags(name, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags wherever they stand among the positional
// arguments, as users type them (`check *.yaml --strict`, `dlq requeue ID
// -c FILE`), appending each positional argument to pos; everything after a
// lone "--" is positional. It returns a helpRequest for -h, and errUsage for
// a mistake (printed, with the usage).
func parseArgs(fs *flag.FlagSet, args []string, pos *[]string) error {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package would print help to stderr
	defer func() { fs.Usage = usage }()
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return helpRequest{fs}
			}
			usage()
			return errUsage
		}
		rest := fs.Args()
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			*pos = append(*pos, rest...)
			return nil
		}
		if len(rest) == 0 {
			return nil
		}
		*pos, args = append(*pos, rest[0]), rest[1:]
	}
}

// helpRequest is a command's -h: run prints the command's help to stdout.
type helpRequest struct{ fs *flag.FlagSet }

func (helpRequest) Error() string        { return "help requested" }
func (helpRequest) Is(target error) bool { return target == flag.ErrHelp }

// parseFlags is parseArgs for a command that takes flags only.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var pos []string
	if err := parseArgs(fs, args, &pos); err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr(fs, "%s: unexpected argument %q", fs.Name(), pos[0])
	}
	return nil
}

// needConfig reports a missing -c FILE.
func needConfig(fs *flag.FlagSet, path string) error {
	if path == "" {
		return usageErr(fs, "%s: -c FILE is required", fs.Name())
	}
	return nil
}

// usageErr prints a message and the usage, and returns errUsage.
func usageErr(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), format+"\n", args...)
	fs.Usage()
	return errUsage
}

// subcommand returns args[0] when it is one of subs. Otherwise it prints
// help, to stdout for -h (returning flag.ErrHelp) and to stderr for a
// mistake (returning errUsage).
func subcommand(args []string, help string, stdout, stderr io.Writer, subs ...string) (string, error) {
	switch {
	case len(args) > 0 && slices.Contains(subs, args[0]):
		return args[0], nil
	case len(args) > 0 && slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]):
		fmt.Fprint(stdout, help)
		return "", flag.ErrHelp
	case len(args) > 0:
		fmt.Fprintf(stderr, "unknown subcommand %q\n\n", args[0])
	}
	fmt.Fprint(stderr, help)
	return "", errUsage
}

// choice is a flag value that must be one of a few words.
type choice struct {
	value   string
	allowed []string
}

func (c *choice) String() string { return c.value }

func (c *choice) Set(s string) error {
	if !slices.Contains(c.allowed, s) {
		return fmt.Errorf("must be %s", strings.Join(c.allowed, ", "))
	}
	c.value = s
	return nil
}

// formatFlag defines --format, one of formats; the first is the default.
func formatFlag(fs *flag.FlagSet, formats ...string) *string {
	c := &choice{value: formats[0], allowed: formats}
	fs.Var(c, "format", "output `format`: "+strings.Join(formats, ", "))
	return &c.value
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// loadValid loads the config at path, the -c FILE of fs (required), with
// loadConfig and refuses one with errors, as run does, printing them.
func loadValid(fs *flag.FlagSet, path string) (*routes.Config, error) {
	if err := needConfig(fs, path); err != nil {
		return nil, err
	}
	cfg, probs, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	if errs := probs.Errors(); len(errs) > 0 {
		_ = errs.WriteText(fs.Output())
		fmt.Fprintf(fs.Output(), "config invalid: %s\n", count(len(errs), "error"))
		return nil, errInvalid
	}
	return cfg, nil
}
