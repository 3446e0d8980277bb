#!/usr/bin/env bash
# The differential corpus (see differential.sh): real programs, with and without the shim.
exec bash "$(dirname "$0")/differential.sh" "$@"
