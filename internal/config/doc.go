// Package config decodes the YAML configuration files of the binaries
// strictly (SPEC §6): unknown keys, duplicate keys and wrong types are
// errors that name the key's full path ("clock.delta_ms"), so an operator
// can find the line to fix. Validation of values stays with each config
// type's Validate method; this package only decodes.
package config
