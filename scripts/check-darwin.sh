#!/usr/bin/env bash
# Type-checks the code that only Darwin compiles, as far as Linux can: the kqueue selector
# (Sources/Tether/Platform/Selector+Kqueue.swift) against Darwin's declarations of
# kqueue(2) and kevent(2) (scripts/darwin-stub), in Swift 6 mode with warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
stub=scripts/darwin-stub
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The module imports CTetherShims beside Darwin; on Darwin it declares nothing the
# selector uses, so an empty module stands in for it.
mkdir -p "$work/CTetherShims"
printf 'module CTetherShims {\n    header "shims.h"\n    export *\n}\n' > "$work/CTetherShims/module.modulemap"
: > "$work/CTetherShims/shims.h"
swiftc -typecheck -swift-version 6 -warnings-as-errors -package-name tether \
    -I "$stub" -I "$work/CTetherShims" \
    Sources/Tether/Platform/Selector+Kqueue.swift Sources/Tether/Platform/Selector.swift "$stub/Platform.swift"
echo "Selector+Kqueue.swift type-checks against Darwin's kqueue declarations"
