package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tckclk/tckclk/agent"
	"github.com/tckclk/tckclk/internal/config"
	"github.com/tckclk/tckclk/internal/secret"
)

// describe names the flag when the bad key came from one.
func describe(err error, set map[string]bool, keys *config.KeyFlags) string {
	var ce *config.Error
	if errors.As(err, &ce) {
		key, _, _ := strings.Cut(ce.Path, "[")
		if f, ok := ownFlag[key]; ok && set[f] {
			return "--" + f + ": " + err.Error()
		}
		if keys.Set(key) {
			return "--" + key + ": " + err.Error()
		}
	}
	return err.Error()
}

// printConfig prints the effective configuration; the secret itself is
// never printed, only where it comes from.
func printConfig(cfg agent.Config, env secret.Lookup, stdout, stderr io.Writer, set map[string]bool, keys *config.KeyFlags) int {
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "tckclk-agent: %s\n", describe(err, set, keys))
		return 2
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "tckclk-agent: %v\n", err)
		return 1
	}
	status := 0
	sec, serr := secret.LoadClock(env, cfg.SecretFile)
	if serr != nil {
		fmt.Fprintf(stdout, "# secret: NOT LOADABLE: %v\n", serr)
		status = 2
	} else {
		fmt.Fprintf(stdout, "# secret: %s (%s)\n", sec, sec.Origin())
	}
	if cfg.Dev {
		fmt.Fprintln(stdout, "# DEVELOPMENT REFERENCE: signs with dev_key, loopback only")
	}
	stdout.Write(out)
	return status
}
