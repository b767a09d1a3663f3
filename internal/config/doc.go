// Package config decodes the configuration of the binaries strictly (SPEC
// §6), from YAML files and from flags: unknown keys, duplicate keys and
// wrong types are errors that name the key's full path ("clock.delta_ms")
// or the flag ("--clock.delta_ms"), so an operator can find what to fix.
//
// Numbers follow the wire's rule (SPEC §1.2 `number`) in files and flags
// alike: plain decimal, no sign, leading zero, base prefix, underscore or
// exponent (YAML would otherwise read 0500 as octal 320); a field of a
// signed Go type may take one leading '-'. Durations use Go's syntax.
//
// KeyFlags makes every leaf key a flag and renders --help from the structs'
// help tags and the defaults. Validation of values stays with each config
// type's Validate method; this package only decodes.
package config
