package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/parsley-go/parsley/internal/kafkasec"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
	"gopkg.in/yaml.v3"
)

// This file is the one place that shapes the commands' flags. finishFlags
// runs over every command once app() has listed them, so a flag added to
// any command later gets the same treatment without more code:
//
//   - a command with --brokers talks to Kafka and gets the TLS and SASL
//     flags;
//   - every command gets --log-format and --config;
//   - every flag without an environment variable gets PARSLEY_<NAME>
//     (dashes become underscores);
//   - every flag can come from the --config file, YAML or TOML, one
//     top-level key per flag name.
//
// Precedence, highest first: the command line, the environment, the config
// file, the flag's default.

const configFlagName = "config"

func securityFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "tls", Category: "Kafka security", Usage: "connect to the brokers with TLS (implied by any --tls-* flag)"},
		&cli.StringFlag{Name: "tls-ca", Category: "Kafka security", Usage: "PEM CA bundle that signed the brokers' certificates (default: the system roots)"},
		&cli.StringFlag{Name: "tls-cert", Category: "Kafka security", Usage: "PEM client certificate, for brokers that require mutual TLS (with --tls-key)"},
		&cli.StringFlag{Name: "tls-key", Category: "Kafka security", Usage: "PEM private key of --tls-cert"},
		&cli.StringFlag{Name: "tls-server-name", Category: "Kafka security", Usage: "name to verify the brokers' certificates against (default: each broker's host)"},
		&cli.BoolFlag{Name: "tls-insecure-skip-verify", Category: "Kafka security", Usage: "do not verify the brokers' certificates (tests only: anyone on the path can read and change the traffic)"},
		&cli.StringFlag{Name: "sasl-mechanism", Category: "Kafka security", Usage: "SASL mechanism: " + strings.Join(kafkasec.Mechanisms, ", ")},
		&cli.StringFlag{Name: "sasl-user", Category: "Kafka security", Usage: "SASL user (PLAIN, SCRAM)"},
		&cli.StringFlag{Name: "sasl-password", Category: "Kafka security", Usage: "SASL password (PLAIN, SCRAM); prefer --sasl-password-file"},
		&cli.StringFlag{Name: "sasl-password-file", Category: "Kafka security", Usage: "file holding the SASL password, read at each authentication"},
		&cli.StringFlag{Name: "sasl-token-file", Category: "Kafka security", Usage: "file holding the OAUTHBEARER token, read at each authentication"},
	}
}

func logFormatFlag() cli.Flag {
	return &cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format on stderr: text or json"}
}

func configFlag() cli.Flag {
	return &cli.StringFlag{Name: configFlagName, EnvVars: []string{"PARSLEY_CONFIG"},
		Usage: "read flags from this YAML (.yaml, .yml) or TOML (.toml) file, one key per flag name; the command line and environment win"}
}

// finishFlags completes every command of a as the comment at the top of
// this file says.
func finishFlags(a *cli.App) {
	for _, cmd := range a.Commands {
		if slices.ContainsFunc(cmd.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "brokers") }) {
			cmd.Flags = append(cmd.Flags, securityFlags()...)
		}
		cmd.Flags = append(cmd.Flags, logFormatFlag(), configFlag())
	}
	// A config file may be shared by several commands (serve's unit and an
	// operator's scan), so a key is known if any command has the flag; a
	// key no command has is a typo and refused.
	known := map[string]bool{}
	for _, cmd := range a.Commands {
		for _, f := range cmd.Flags {
			known[f.Names()[0]] = true
		}
	}
	delete(known, configFlagName)
	for _, cmd := range a.Commands {
		for i, f := range cmd.Flags {
			if f.Names()[0] != configFlagName {
				cmd.Flags[i] = fromConfigFile(f)
			}
		}
		cmd.Action = logFinalError(cmd.Action)
		before := cmd.Before
		flags := cmd.Flags
		cmd.Before = func(c *cli.Context) error {
			if err := applyConfigFile(c, flags, known); err != nil {
				return err
			}
			if _, err := logFormat(c); err != nil {
				return err
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
	}
}

// logFinalError makes the error a command ends with, in --log-format json,
// a JSON log record like every other line on stderr (text keeps main's
// one "parsley-observe: ..." line, easier on a terminal).
func logFinalError(action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		err := action(c)
		if err == nil {
			return nil
		}
		if f, _ := logFormat(c); f != "json" {
			return err
		}
		code, msg := 2, err.Error()
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		if msg != "" {
			newLogger(c, slog.LevelError).Error(msg, "exit", code)
		}
		return cli.Exit("", code)
	}
}

// envName is the environment variable of a flag that names none.
func envName(flag string) string {
	return "PARSLEY_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// fromConfigFile gives f an environment variable if it has none and wraps
// it so applyConfigFile can set it. TestEveryFlagComesFromTheConfigFile
// fails on a flag type this switch does not know.
func fromConfigFile(f cli.Flag) cli.Flag {
	env := func(vars *[]string, name string) {
		if len(*vars) == 0 {
			*vars = []string{envName(name)}
		}
	}
	switch f := f.(type) {
	case *cli.StringFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewStringFlag(f)
	case *cli.StringSliceFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewStringSliceFlag(f)
	case *cli.BoolFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewBoolFlag(f)
	case *cli.IntFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewIntFlag(f)
	case *cli.Int64Flag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewInt64Flag(f)
	case *cli.UintFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewUintFlag(f)
	case *cli.Float64Flag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewFloat64Flag(f)
	case *cli.DurationFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewDurationFlag(f)
	case *cli.PathFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewPathFlag(f)
	case *cli.IntSliceFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewIntSliceFlag(f)
	case *cli.GenericFlag:
		env(&f.EnvVars, f.Name)
		return altsrc.NewGenericFlag(f)
	}
	return f
}

// applyConfigFile sets, from the --config file, each of flags that neither
// the command line nor the environment set. A key no command knows, a
// value of the wrong type or an unreadable file exits 2 naming the file.
func applyConfigFile(c *cli.Context, flags []cli.Flag, known map[string]bool) error {
	path := c.String(configFlagName)
	if path == "" {
		return nil
	}
	fail := func(format string, args ...any) error {
		return cli.Exit(fmt.Sprintf("--config %s: ", path)+fmt.Sprintf(format, args...), 2)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fail("%v", errors.Unwrap(err))
	}
	var keys map[string]any
	var src altsrc.InputSourceContext
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		if err := yaml.Unmarshal(b, &keys); err != nil {
			return fail("%v", err)
		}
		src, err = altsrc.NewYamlSourceFromFile(path)
	case ".toml":
		if err := toml.Unmarshal(b, &keys); err != nil {
			return fail("%v", err)
		}
		src, err = altsrc.NewTomlSourceFromFile(path)
	default:
		return fail("unknown format %q: want .yaml, .yml or .toml", ext)
	}
	if err != nil {
		return fail("%v", err)
	}
	var unknown []string
	for k := range keys {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fail("unknown setting %s (keys are flag names without the dashes, e.g. tls-ca)", strings.Join(unknown, ", "))
	}
	if err := altsrc.ApplyInputSourceValues(c, src, flags); err != nil {
		return fail("%v", err)
	}
	return nil
}

// clientOpts reads the TLS and SASL flags into franz-go options.
func clientOpts(c *cli.Context) ([]kgo.Opt, error) {
	cfg := kafkasec.Config{
		TLS: c.Bool("tls"), CAFile: c.String("tls-ca"), CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key"),
		ServerName: c.String("tls-server-name"), InsecureSkipVerify: c.Bool("tls-insecure-skip-verify"),
		Mechanism: c.String("sasl-mechanism"), User: c.String("sasl-user"), Password: c.String("sasl-password"),
		PasswordFile: c.String("sasl-password-file"), TokenFile: c.String("sasl-token-file"),
	}
	opts, err := cfg.Opts()
	var se *kafkasec.SettingError
	if errors.As(err, &se) {
		return nil, cli.Exit(fmt.Sprintf("--%s: %v", se.Setting, se.Err), 2)
	}
	return opts, err
}

// logFormat reads --log-format.
func logFormat(c *cli.Context) (string, error) {
	switch f := c.String("log-format"); f {
	case "text", "json":
		return f, nil
	default:
		return "", cli.Exit(fmt.Sprintf("--log-format %q: want text or json", f), 2)
	}
}

// newLogger is every command's logger: slog on stderr, in --log-format,
// every line tagged with the command.
func newLogger(c *cli.Context, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(c.App.ErrWriter, opts)
	if f, _ := logFormat(c); f == "json" {
		h = slog.NewJSONHandler(c.App.ErrWriter, opts)
	}
	return slog.New(h).With("command", c.Command.Name)
}
